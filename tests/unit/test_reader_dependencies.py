"""Faults named as faults (issue 54): every library the document readers import is declared
in pyproject.toml itself (not left to another library's metadata, which Python 3.11's own pip
23.2 misread for `lxml_html_clean`); `check_readers` names what is missing; and a reader that
cannot import is the server's fault (`ParserFailed`), never the file's (`ParseRefused`).

The soak-marked test installs nothing: it resolves the project with the pip that Python 3.11
ships (`ensurepip`, no upgrade) in a fresh venv, `pip install --dry-run --report`, and reads
what it would install (about 1.5 min, over the network)."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from infra.documents import ParseRefused, ParserFailed, parse_bytes
from infra.documents.readers import NEEDS, READER_MODULES, check_readers

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ROOT / "infra" / "documents"
PROJECT = {"contracts", "infra", "engines", "workers", "orchestrator", "api", "client"}
PAGE = b"<html><head><title>Quay</title></head><body><p>The quay was built in 1880.</p></body>"


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    """The distributions pyproject.toml's `dependencies` name directly."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = set()
    for requirement in project["dependencies"]:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        assert match, requirement
        names.add(normalized(match.group(1)))
    return names


def third_party_imports() -> dict[str, set[str]]:
    """Top-level module -> the infra/documents modules that import it (inside functions too),
    the standard library and the project's own packages left out."""
    found: dict[str, set[str]] = {}
    for path in sorted(DOCUMENTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in PROJECT:
                    found.setdefault(top, set()).add(path.name)
    return found


def test_every_module_the_readers_import_comes_from_a_declared_distribution() -> None:
    providers = importlib.metadata.packages_distributions()
    wanted = declared()
    modules = set(third_party_imports()) | {need.module.split(".")[0] for need in NEEDS}
    assert {"PIL", "pypdfium2", "docx", "pptx", "trafilatura", "lxml"} <= modules
    assert "lxml_html_clean" in modules, "trafilatura needs it, through jusText"
    undeclared = {
        module: providers.get(module, ["(not installed)"])
        for module in sorted(modules)
        if not {normalized(d) for d in providers.get(module, [])} & wanted
    }
    assert not undeclared, f"declare these in pyproject.toml's dependencies: {undeclared}"


def test_the_start_up_check_covers_every_library_the_readers_import() -> None:
    checked = {need.module.split(".")[0] for need in NEEDS}
    missed = {m: files for m, files in third_party_imports().items() if m not in checked}
    assert not missed, f"add to infra/documents/readers.py NEEDS: {missed}"
    readers = {f"infra.documents.{p.stem}" for p in DOCUMENTS.glob("*.py")}
    assert set(READER_MODULES) <= readers


def test_every_reader_loads_here() -> None:
    assert check_readers() == []


def test_a_missing_library_is_named_with_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "lxml_html_clean", None)  # import fails: not installed
    monkeypatch.setitem(sys.modules, "docx", None)
    monkeypatch.setitem(sys.modules, "docx.table", None)
    assert check_readers() == [
        "the Word reader cannot load: the library python-docx is not installed "
        "(pip install python-docx; `pip install -e .` in the checkout installs every "
        "reader's library)",
        "the HTML reader cannot load: the library lxml_html_clean is not installed "
        "(pip install lxml_html_clean; `pip install -e .` in the checkout installs every "
        "reader's library)",
    ]


def test_a_missing_ocr_program_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from infra.documents import ocr

    monkeypatch.setattr(ocr, "tesseract_program", lambda: None)
    assert check_readers() == [
        "OCR (scanned PDF pages, images) cannot run: the tesseract program is missing: "
        "install tesseract-ocr (make setup)"
    ]


def test_a_reader_whose_import_fails_is_the_servers_fault(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert parse_bytes(PAGE, "quay.html").text.startswith("The quay was built")
    monkeypatch.setitem(sys.modules, "trafilatura", None)
    with pytest.raises(ParserFailed) as failed:
        parse_bytes(PAGE, "quay.html")
    assert not isinstance(failed.value, ParseRefused)
    assert str(failed.value) == (
        "the HTML reader cannot load on this server, so quay.html was not read: the library "
        "trafilatura is not installed (pip install trafilatura; `pip install -e .` in the "
        "checkout installs every reader's library)"
    )


def test_without_lxml_html_clean_web_pages_fail_as_the_servers_fault(tmp_path: Path) -> None:
    """The install that pip 23.2 made, in a fresh interpreter: `lxml_html_clean` shadowed by
    a package that cannot be imported. The page is not refused as damaged: the parser failed,
    and says which library is missing; `check_readers` says so too."""
    shadow = tmp_path / "lxml_html_clean"
    shadow.mkdir()
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'lxml_html_clean'\", name='lxml_html_clean')\n"
    )
    script = (
        "import json\n"
        "from infra.documents import ParserFailed, ParseRefused, parse_bytes\n"
        "from infra.documents.readers import check_readers\n"
        f"try:\n    parse_bytes({PAGE!r}, 'quay.html')\n"
        "except (ParserFailed, ParseRefused) as exc:\n"
        "    print(json.dumps([type(exc).__name__, str(exc), check_readers()]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    kind, message, problems = json.loads(done.stdout)
    assert kind == "ParserFailed", message
    assert message.startswith("the HTML reader cannot load on this server, so quay.html was not")
    assert "lxml_html_clean" in message
    assert problems == [
        "the HTML reader cannot load: the library lxml_html_clean is not installed "
        "(pip install lxml_html_clean; `pip install -e .` in the checkout installs every "
        "reader's library)"
    ]


PYTHON_311 = shutil.which("python3.11")


@pytest.mark.soak
@pytest.mark.skipif(PYTHON_311 is None, reason="no python3.11 on PATH")
def test_python_311s_own_pip_installs_every_readers_library(tmp_path: Path) -> None:
    """The readers' requirements as pyproject.toml states them, resolved by the pip that
    Python 3.11 ships (no upgrade) in a fresh venv, without installing: every library the
    readers import is among what it would install, `lxml_html_clean` included. (The whole
    project resolves the same way in 1.5-2.5 min, torch and all: `pip install --dry-run .`.)"""
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/env", "python3.11", "-m", "venv", str(venv)], check=True, timeout=120)
    pip = venv / "bin" / "pip"
    version = subprocess.run(
        [pip, "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    wanted = {normalized(need.distribution) for need in NEEDS}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [
        line
        for line in project["dependencies"]
        if normalized(re.split(r"[\s\[<>=!~;]", line.strip(), maxsplit=1)[0]) in wanted
    ]
    assert len(requirements) == len(wanted), requirements
    report = tmp_path / "report.json"
    resolve = [pip, "install", "--dry-run", "--ignore-installed", "-q", "--report", report]
    done = subprocess.run(
        [*resolve, *requirements],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    if done.returncode != 0 and re.search(r"NewConnectionError|Max retries|No route", done.stderr):
        pytest.skip(f"no package index answers: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    chosen = {
        normalized(item["metadata"]["name"]) for item in json.loads(report.read_text())["install"]
    }
    print(f"pip {version} would install {sorted(chosen)}")
    assert version.startswith("23."), "Python 3.11's own pip"
    assert wanted <= chosen, f"pip {version} leaves out {wanted - chosen}"
