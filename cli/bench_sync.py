"""`ragbus bench-sync`: a folder source's first sync, re-sync, watch and deletions, against
`ragbus ingest` on the same files (`bench.sync`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from cli.common import console, interactive_logging, save_json
from infra.settings import Settings


def register(app: typer.Typer) -> None:
    app.command("bench-sync")(bench_sync)


def bench_sync(
    corpora: Annotated[
        list[Path],
        typer.Argument(
            exists=True,
            dir_okay=False,
            help="BEIR corpus.jsonl files; where they hold fewer rows than --files, rows are "
            "taken again with their sentences in another order.",
        ),
    ],
    files: Annotated[int, typer.Option(min=100, help="Files written (one a document).")] = 10_000,
    work: Annotated[
        Path, typer.Option(help="Where the folder, the stack's data and its log go (emptied).")
    ] = Path("/tmp/ragbus-bench-sync"),
    writes: Annotated[
        int, typer.Option(min=1, help="Files written one at a time under watch.")
    ] = 20,
    seed: Annotated[int, typer.Option(help="The files' kinds and the changes' seed.")] = 57,
    out: Annotated[Path, typer.Option(help="Where to write the JSON report.")] = Path(
        "results/bench-sync.json"
    ),
) -> None:
    """Write N files of mixed kinds (Markdown, text, HTML, Word) from BEIR corpora, start a
    stack of its own, and measure: `ragbus ingest` of the folder; a source's first sync of
    the same folder (its speed against the ingest's: goal ≥ 0.9×); a re-sync with 1 % of the
    files changed (goal ≤ 5 % of the first sync's time); under `watch`, how long after a
    write a `retrieve` request finds it (p95, goal ≤ 5 s); and, after 1 % are deleted, what
    is left of them in each store (goal 0)."""
    from bench.sync import summary
    from bench.sync_run import run_bench_sync

    interactive_logging(Settings(), verbose=False)
    work.mkdir(parents=True, exist_ok=True)
    report = asyncio.run(run_bench_sync(corpora, files, work.resolve(), seed, writes, console))
    console.print_json(json.dumps(report))
    summary(report, console)
    save_json(report, out)
