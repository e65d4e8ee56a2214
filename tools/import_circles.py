"""Import circles between the product's modules: `make lint` fails on any.

grimp (the graph beneath import-linter) reads every import of the product's packages, those
inside functions and under `TYPE_CHECKING` included, and this prints each strongly connected
component of more than one module. A split that makes a circle is worse than a long file.
Usage: `python tools/import_circles.py`; exit 1 when there is a circle.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import grimp
import networkx as nx

ROOT = Path(__file__).resolve().parents[1]


def packages() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return list(config["tool"]["importlinter"]["root_packages"])


def circles(names: list[str] | None = None, root: Path = ROOT) -> list[list[str]]:
    """The circles among the modules of `names` (default: the product's packages), found
    under `root`."""
    sys.path.insert(0, str(root))
    try:
        graph = grimp.build_graph(*(names or packages()), include_external_packages=False)
    finally:
        sys.path.remove(str(root))
    edges = nx.DiGraph()
    for module in graph.modules:
        edges.add_node(module)
        for imported in graph.find_modules_directly_imported_by(module):
            edges.add_edge(module, imported)
    return sorted(
        sorted(component)
        for component in nx.strongly_connected_components(edges)
        if len(component) > 1
    )


def main() -> int:
    found = circles()
    for circle in found:
        print("import circle: " + " <-> ".join(circle))
    print(f"import circles: {len(found)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
