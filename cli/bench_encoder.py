"""`ragbus bench-encoder`: the encoder on each device this machine has (`bench.encoder_devices`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from cli.common import console, save_json


def register(app: typer.Typer) -> None:
    app.command("bench-encoder")(bench_encoder)


def bench_encoder(
    beir: Annotated[
        Path, typer.Argument(exists=True, help="A BEIR folder (corpus.jsonl, queries.jsonl).")
    ],
    limit: Annotated[int, typer.Option(min=1, help="Documents, the first ones.")] = 1000,
    queries: Annotated[int, typer.Option(min=1, help="Queries encoded one at a time.")] = 200,
    rounds: Annotated[
        int, typer.Option(min=1, help="Configurations measured in turn; the last round counts.")
    ] = 1,
    out: Annotated[Path, typer.Option(help="Where to write the JSON report.")] = Path(
        "results/encoder-devices.json"
    ),
) -> None:
    """Ingestion's encoder work (the chunks' vectors and their sentences') and one query's
    encoding, on the CPU and, where CUDA is available, on the GPU as ragbus sets it up and in
    the other precision; each compared with the CPU's vectors."""
    from bench.encoder_devices import run

    report = asyncio.run(run(beir, limit, queries, rounds))
    save_json(report, out)
    for name, found in report["configurations"].items():
        ingest, query = found["ingest"], found["query_ms"]
        console.print(
            f"{name:10} {found['runtime']} {found['precision']}: "
            f"{ingest['chunks_per_min']:,} chunks/min, query p50 {query['p50']:.1f} ms"
        )
    console.print(f"wrote {out}")
