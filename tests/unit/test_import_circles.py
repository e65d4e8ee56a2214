"""`make lint`'s circle check (`tools/import_circles.py`): it finds a circle between two files
and a longer one through a package's `__init__`, and the product has none."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("import_circles", ROOT / "tools/import_circles.py")
assert spec is not None and spec.loader is not None
import_circles = importlib.util.module_from_spec(spec)
spec.loader.exec_module(import_circles)


def _package(root: Path, name: str, files: dict[str, str]) -> None:
    folder = root / name
    folder.mkdir()
    for file, text in files.items():
        (folder / file).write_text(text, encoding="utf-8")


def test_a_circle_between_two_files_and_one_through_an_init_are_found(tmp_path: Path) -> None:
    _package(
        tmp_path,
        "circled",
        {
            "__init__.py": "from circled.c import C\n",
            "a.py": "from circled.b import B\nA = 1\n",
            "b.py": "def f():\n    from circled.a import A\n    return A\nB = 2\n",
            "c.py": "import circled.d\nC = 3\n",
            "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import circled\n",
            "e.py": "import circled.a\n",
        },
    )
    try:
        found = import_circles.circles(["circled"], tmp_path)
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] == "circled"]:
            del sys.modules[name]
    assert found == [
        ["circled", "circled.c", "circled.d"],
        ["circled.a", "circled.b"],
    ]


def test_the_product_has_no_import_circle() -> None:
    assert import_circles.circles() == []
