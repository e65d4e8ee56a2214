"""Can every reader load? The libraries and the program the parsers need, checked where a
parse worker starts (`check_readers`, or `check_readers_apart` in a fresh interpreter, as the
parser's own child is), so that a broken install is said once, by the name of what is missing,
and the worker is not ready; and a reader that fails to import while parsing is the server's
fault (`ParserFailed` through `missing_library`), never the file's.

The readers import their libraries when a file of their kind is first parsed (in the parser's
child process), so without this a missing library showed only as every file of one kind
refused, as if each were damaged: with Python 3.11's own pip (23.2), `pip install -e .` left
out `lxml_html_clean` (trafilatura needs it through an extra of an extra), and every web page
was refused so.

`python -m infra.documents.readers` prints the problems as a JSON list (empty: all load).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
from dataclasses import dataclass

CHECK_TIMEOUT_S = 60.0
"""How long `check_readers_apart` waits for its interpreter (about a second of imports)."""
REINSTALL = "`pip install -e .` in the checkout installs every reader's library"


@dataclass(frozen=True)
class Need:
    """One module a reader imports, and the distribution (pip's name) that provides it."""

    reader: str
    module: str
    distribution: str


NEEDS: tuple[Need, ...] = (
    # every parse: the parser's child sets Pillow's pixel bound before anything else
    Need("every", "PIL.Image", "pillow"),
    Need("PDF", "pypdfium2", "pypdfium2"),
    Need("PDF", "pypdfium2.raw", "pypdfium2"),
    Need("image", "PIL.ImageOps", "pillow"),
    Need("Word", "docx", "python-docx"),
    Need("Word", "docx.table", "python-docx"),
    Need("Word", "docx.text.paragraph", "python-docx"),
    Need("PowerPoint", "pptx", "python-pptx"),
    Need("HTML", "lxml.html", "lxml"),
    # trafilatura's jusText imports lxml.html.clean, which is this project now
    Need("HTML", "lxml_html_clean", "lxml_html_clean"),
    Need("HTML", "trafilatura", "trafilatura"),
    Need("HTML", "trafilatura.utils", "trafilatura"),
)
"""What the readers (`infra.documents.pdf`, `ocr`, `office`, `html`) import, directly or, for
`lxml_html_clean`, through a library whose own metadata may fail to bring it."""

READER_MODULES = (
    "infra.documents.pdf",
    "infra.documents.pdf_layout",
    "infra.documents.ocr",
    "infra.documents.office",
    "infra.documents.html",
    "infra.documents.text",
)
"""The readers themselves (their libraries are imported inside their functions)."""

_DISTRIBUTIONS = {need.module.split(".")[0]: need.distribution for need in NEEDS}


def missing_library(exc: ImportError) -> str:
    """What a failed import says is missing, and how to install it, in a few words."""
    name = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if name:
        distribution = _DISTRIBUTIONS.get(name.split(".")[0])
        if distribution is not None:
            return (
                f"the library {distribution} is not installed "
                f"(pip install {distribution}; {REINSTALL})"
            )
        return f"the module {name} is not installed (a library's own dependency: {REINSTALL})"
    lines = str(exc).strip().splitlines()
    said = lines[0][:300] if lines else "no message"
    return f"{type(exc).__name__}: {said} ({REINSTALL})"


def _import_problem(need: Need) -> tuple[str, bool] | None:
    """What importing `need.module` says, and whether it is that module's own absence (not
    one of its imports failing, which may be another need's problem already told)."""
    try:
        importlib.import_module(need.module)
    except ImportError as exc:
        readers = "every reader" if need.reader == "every" else f"the {need.reader} reader"
        own = (
            isinstance(exc, ModuleNotFoundError)
            and (exc.name or "").split(".")[0] == (need.module.split(".")[0])
        )
        return f"{readers} cannot load: {missing_library(exc)}", own
    except Exception as exc:  # a library that imports but cannot start (its C part, say)
        return (
            f"the {need.reader} reader cannot load: importing {need.module} failed "
            f"({type(exc).__name__}: {str(exc)[:300]}; {REINSTALL})"
        ), True
    return None


def _ocr_problem() -> str | None:
    from infra.documents.ocr import INSTALL_HINT, LANGUAGE, tesseract_program

    program = tesseract_program()
    if program is None:
        return (
            "OCR (scanned PDF pages, images) cannot run: the tesseract program is missing: "
            f"{INSTALL_HINT}"
        )
    try:
        listed = subprocess.run(
            [program, "--list-langs"], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"OCR cannot run: {program} --list-langs failed ({type(exc).__name__}: {exc})"
    languages = (listed.stdout + listed.stderr).decode(errors="replace").split()
    if LANGUAGE not in languages:
        return (
            f"OCR cannot run: tesseract has no {LANGUAGE!r} language data "
            f"(install tesseract-ocr-{LANGUAGE})"
        )
    return None


def check_readers() -> list[str]:
    """Import every reader and every library they use, and look for the OCR program: one
    sentence for each problem, naming what is missing and how to install it (empty: every
    reader loads). Imports here, in this process: `check_readers_apart` keeps them out of it."""
    problems = []
    for module in READER_MODULES:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            problems.append(f"the reader {module} cannot load: {missing_library(exc)}")
    told: set[str] = set()  # distributions and readers with a problem told
    for need in NEEDS:
        found = _import_problem(need)
        if found is None or need.distribution in told:
            continue  # one sentence for a distribution (docx and docx.table: python-docx)
        problem, own = found
        if own or need.reader not in told:  # trafilatura failing for lxml_html_clean: told
            told.update((need.distribution, need.reader))
            problems.append(problem)
    ocr = _ocr_problem()
    if ocr is not None:
        problems.append(ocr)
    return problems


async def check_readers_apart(timeout_s: float = CHECK_TIMEOUT_S) -> list[str]:
    """`check_readers` in a fresh interpreter of this one (`main`):
    what the parser's spawned child will find, without this process holding the readers'
    libraries (tens of MB) for nothing. A check that cannot run is a problem too."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        f"import {__name__} as readers; readers.main()",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        return [f"the readers' check did not finish within {timeout_s:g} s"]
    finally:
        if process.returncode is None:
            process.kill()  # reaped by the event loop's child watcher
    try:
        problems = json.loads(out)
    except ValueError:
        problems = None
    if process.returncode != 0 or not isinstance(problems, list):
        said = err.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        return [f"the readers' check failed (exit {process.returncode}: {said[0][:300]})"]
    return [str(problem) for problem in problems]


def main() -> None:
    """The problems as a JSON list on stdout (`python -m infra.documents.readers`)."""
    sys.stdout.write(json.dumps(check_readers()) + "\n")


if __name__ == "__main__":
    main()
