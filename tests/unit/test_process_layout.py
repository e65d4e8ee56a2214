"""`ragbus worker` refuses a layout where a reader of the embedded stores is not in the process
that writes them: it would read a snapshot that never changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from infra.settings import Settings
from launcher.layout import STORE_READERS, embedded_layout_problem, up_layout


def test_a_fuse_worker_of_its_own_is_refused_in_embedded_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("RAGBUS_QDRANT_URL", raising=False)
    monkeypatch.delenv("RAGBUS_NEO4J_URI", raising=False)
    result = CliRunner().invoke(app, ["worker", "fuse"])
    assert result.exit_code == 2
    assert "fuse would read the embedded vectors and graph store" in result.output
    assert "ragbus worker search fuse tool ingest" in result.output


@pytest.mark.parametrize(
    ("kinds", "servers", "refused"),
    [
        (("search", "fuse", "tool", "ingest"), {}, False),
        (("classify", "generate", "critic"), {}, False),
        (("ingest",), {}, False),
        (("search",), {}, True),
        (("fuse",), {"qdrant_url": "http://q:6333"}, True),  # the graph is still embedded
        (("fuse",), {"qdrant_url": "http://q:6333", "neo4j_uri": "bolt://n:7687"}, False),
    ],
)
def test_which_layouts_are_refused(
    kinds: tuple[str, ...], servers: dict[str, str], refused: bool
) -> None:
    problem = embedded_layout_problem(Settings(**servers), kinds)  # type: ignore[arg-type]
    assert (problem is not None) is refused


@pytest.mark.parametrize(
    ("processes", "parent", "child"),
    [
        (1, ("classify", "search", "fuse", "generate", "critic"), ()),
        (2, ("classify", "generate", "critic"), ("search", "fuse")),
    ],
)
def test_up_and_the_bus_benchmark_lay_out_kinds_alike(
    processes: int, parent: tuple[str, ...], child: tuple[str, ...]
) -> None:
    """`ragbus up` and the instant stack (`bench.instant`) share `up_layout`: the readers of
    the stores always in the child, with the API and the saga's neighbours in the parent."""
    settings = Settings(up_processes=processes)
    kinds = ("classify", "search", "fuse", "generate", "critic")
    assert up_layout(settings, kinds) == (parent, child)
    if child:
        assert not STORE_READERS.intersection(parent)
