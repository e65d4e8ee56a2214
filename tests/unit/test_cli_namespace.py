"""A `--namespace` to index into is checked before anything is published."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cli.common import store_namespace


@pytest.mark.parametrize("good", ["nfcorpus", "ing-w", "my_docs", "a", None])
def test_a_store_namespace_passes(good: str | None) -> None:
    assert store_namespace(good) == good


@pytest.mark.parametrize("bad", ["Bad-NS", "-lead", "with space", "x" * 98, ""])
def test_a_bad_namespace_is_a_usage_error(bad: str) -> None:
    with pytest.raises(typer.BadParameter, match="is not a namespace"):
        store_namespace(bad)


@pytest.mark.parametrize("command", ["ingest", "bench-ingest"])
def test_the_commands_refuse_it_before_publishing(command: str, tmp_path: Path) -> None:
    from cli.app import app

    document = tmp_path / "doc.md"
    document.write_text("# A title\n\nSome text.\n")
    result = CliRunner().invoke(app, [command, str(document), "--namespace", "Ing-W"])
    assert result.exit_code == 2
    assert "is not a namespace" in result.output
