"""The README and docs/ stay true: every setting documented with its default, the two commands
present and real, CI runs them, the README short, the layout table matching the folders, and
every link between the pages pointing at something that exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from infra.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
SETTINGS_PART = CONFIGURATION.split("## Read elsewhere", 1)[0]
"""The tables of `Settings`; the variables read elsewhere (the CLI's, the tests') come after."""
MAX_README_LINES = 320

SETTING_ROW = re.compile(r"^\| `(RAGBUS_[A-Z0-9_]+)` \| ([^|]*) \|", re.MULTILINE)
LINK = re.compile(r"\]\(([^)\s]+)\)")
NOT_IN_THE_LAYOUT = {".venv", ".git", "ragbus.egg-info"}
ALWAYS_IN_THE_LAYOUT = {"docs", "tests", "bench", "results"}


def shown_default(value: Any) -> str:
    """A default as the tables write it: `unset` for None, booleans lower case, whole floats
    without their `.0`, anything else in backticks."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, float) and value.is_integer():
        text = str(int(value))
    else:
        text = str(value)
    return f"`{text}`"


def setting_rows(text: str) -> dict[str, str]:
    """`RAGBUS_*` name -> the default its table row shows."""
    return {name: default.strip() for name, default in SETTING_ROW.findall(text)}


def settings_by_variable() -> dict[str, Any]:
    fields = Settings.model_fields.items()
    return {f"RAGBUS_{name.upper()}": field.default for name, field in fields}


def test_every_setting_is_in_the_configuration_page_with_its_default() -> None:
    rows = setting_rows(SETTINGS_PART)
    expected = settings_by_variable()
    assert sorted(set(expected) - set(rows)) == []
    assert sorted(set(rows) - set(expected)) == []  # no row for a setting that is gone
    wrong = {
        name: (rows[name], shown_default(default))
        for name, default in expected.items()
        if rows[name] != shown_default(default)
    }
    assert wrong == {}


def test_the_readme_settings_exist_with_the_defaults_shown() -> None:
    rows = setting_rows(README)
    expected = settings_by_variable()
    assert len(rows) >= 10, "the README keeps the settings a newcomer needs first"
    assert sorted(set(rows) - set(expected)) == []
    wrong = {
        name: (shown, shown_default(expected[name]))
        for name, shown in rows.items()
        if shown != shown_default(expected[name])
    }
    assert wrong == {}
    assert "docs/configuration.md" in README


def test_the_two_commands_are_documented_and_ci_runs_the_test_command() -> None:
    assert "make demo" in README
    assert "make test" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci.splitlines()


def test_every_make_target_the_readme_names_is_in_the_makefile() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.MULTILINE))
    named = set(re.findall(r"\bmake ([a-z][a-z-]*)", README))
    assert {"demo", "test"} <= named
    assert sorted(named - targets) == []


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= MAX_README_LINES


def test_the_readme_shows_the_commands_and_the_picture_before_the_rest() -> None:
    order = [
        README.index("## The two commands"),
        README.index("## How it works"),
        README.index("## Using it"),
        README.index("## Configuration"),
    ]
    assert order == sorted(order)


def layout_rows() -> list[tuple[str, str]]:
    """(path, description) of each row of the README's layout table."""
    section = README.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (.*) \|$", section, re.MULTILINE)
    assert rows, "the README has a layout table"
    return rows


def test_every_folder_in_the_layout_table_exists() -> None:
    missing = []
    for path, description in layout_rows():
        folder = ROOT / path
        if not folder.is_dir():
            missing.append(path)
            continue
        for name in re.findall(r"`([^`\s]+)`", description):
            if name.endswith("/"):  # a folder: from the root, or inside the row's folder
                found = (ROOT / name).is_dir() or (folder / name).is_dir()
            elif name.endswith(".py"):  # a module somewhere in the row's folder
                found = any(folder.rglob(name))
            else:
                continue
            if not found:
                missing.append(f"{path}: {name}")
    assert missing == []


def test_every_top_level_package_is_in_the_layout_table() -> None:
    listed = {path.strip("/") for path, _ in layout_rows()}
    folders = {
        entry.name
        for entry in ROOT.iterdir()
        if entry.is_dir()
        and entry.name not in NOT_IN_THE_LAYOUT
        and ((entry / "__init__.py").exists() or entry.name in ALWAYS_IN_THE_LAYOUT)
    }
    assert sorted(folders - listed) == []


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_every_link_between_the_pages_points_at_something_that_exists() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = page.read_text()
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not checked here
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    pages = sorted(page.name for page in (ROOT / "docs").glob("*.md"))
    assert [name for name in pages if f"(docs/{name})" not in README] == []


def test_the_benchmark_tables_are_the_reports_latest_runs() -> None:
    """`ragbus tables` wrote them from results/*.json, and nobody edited a figure by hand."""
    from bench.tables import rendered

    stale = [
        str(path.relative_to(ROOT))
        for path, text in rendered(ROOT).items()
        if path.read_text(encoding="utf-8") != text
    ]
    assert stale == [], "run `ragbus tables` to rewrite them from results/*.json"


def test_every_benchmark_row_names_its_run() -> None:
    from bench.figures import ROWS
    from bench.tables import table

    rows = table(ROOT / "results").splitlines()[2:]
    assert len(rows) >= len(ROWS) - 1  # chaos-soak.json appears after the first `make soak`
    for row in rows:
        _what, _figures, run, command = (cell.strip() for cell in row.strip("|").split(" | "))
        assert re.match(r"\d{4}-\d{2}-\d{2}, \d+ cores", run), row
        assert command.startswith(("`ragbus ", "`python -m bench.", "`python -m studies.")), row
