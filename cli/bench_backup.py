"""`ragbus bench-backup`: a backup's time and size while ragbus serves, the queries' p95
during backups against idle, and a restore's time until the first answer
(`bench.backup`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from cli.common import ApiUrl, Token, console, errors, save_json


def register(app: typer.Typer) -> None:
    app.command("bench-backup")(bench_backup)


def bench_backup(
    queries: Annotated[Path, typer.Option(help="One question per line, or JSONL.")],
    work: Annotated[
        Path, typer.Option(help="Where the backups and the restored data directory go.")
    ] = Path("/tmp/ragbus-bench-backup"),
    namespace: Annotated[str | None, typer.Option(help="Where the queries search.")] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Load rounds, busy and idle each.")] = 3,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1)] = 8,
    duration: Annotated[float, typer.Option("--duration", "-d", min=5)] = 25.0,
    api: ApiUrl = "http://127.0.0.1:8000",
    token: Token = None,
    out: Annotated[Path, typer.Option(help="The JSON report.")] = Path("results/bench-backup.json"),
) -> None:
    """Against a running stack (this shell's RAGBUS_* settings name its NATS, Redis and data
    directory): `ragbus backup` alone, then back to back under load rounds, then idle rounds;
    then the first backup restored on a fresh data directory and services, and `ragbus up`
    there timed until its first answer."""
    from bench.backup import measure
    from bench.load import load_queries

    if work.exists() and any(work.iterdir()):
        errors.print(f"{work} is not empty: give --work a new directory")
        raise typer.Exit(1)
    report = asyncio.run(
        measure(
            api,
            load_queries(queries),
            work,
            namespace=namespace,
            rounds=rounds,
            concurrency=concurrency,
            duration_s=duration,
            token=token,
            progress=lambda stage: console.print(f"[dim]{stage}[/dim]"),
        )
    )
    backup = report["backup"]
    console.print(
        f"backup: {backup['seconds']:.1f} s, {backup['bytes'] / 1e6:,.1f} MB "
        f"({backup['bytes_on_disk'] / 1e6:,.1f} MB on disk), {backup['streams']} streams, "
        f"{backup['files']} files"
    )
    console.print(
        f"p95 during backups {report['busy_p95_ms']:.0f} ms against {report['idle_p95_ms']:.0f} "
        f"ms idle: {report['ratio']:.2f}x (goal {report['goal_ratio']}x: "
        f"{'met' if report['met'] else 'missed'}); {len(report['backups_during_load'])} "
        f"backups under load"
    )
    console.print(
        f"restore: {report['restore_seconds']:.1f} s; the first answer "
        f"{report['first_answer_after_up_seconds']:.1f} s after ragbus up started"
    )
    save_json(report, out)
    console.print(f"wrote {out}")
