"""`ragbus bench-scale|bench-scaleout`: the real stack as the corpus grows, and the stateless
roles scaled out on a NATS cluster, each printing its figures and writing a JSON report
(`results/`). The measuring is `bench`'s; this module parses options and prints."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.common import (
    DEFAULT_QUERIES,
    Concurrency,
    Duration,
    Queries,
    Verbose,
    Warmup,
    console,
    errors,
    interactive_logging,
    save_json,
)
from infra.settings import Settings


def register(app: typer.Typer) -> None:
    app.command("bench-scale")(bench_scale)
    app.command("bench-scaleout")(bench_scaleout)


def bench_scale(
    sizes: Annotated[
        str,
        typer.Option(
            help="Corpus sizes in chunks, comma-separated (k = thousand, M = million); a size "
            "whose memory, on the line through the two largest measured before it, is past "
            "what the machine has available is left out and named in the report."
        ),
    ] = "10k,300k,1M",
    source: Annotated[
        Path | None,
        typer.Option(help="Data dir holding the ingested namespace (default: RAGBUS_DATA_DIR)."),
    ] = None,
    namespace: Annotated[str, typer.Option(help="The ingested namespace to grow.")] = "nfcorpus",
    work_dir: Annotated[
        Path | None, typer.Option(help="Where the built corpora live (default: <source>/scale).")
    ] = None,
    queries: Queries = DEFAULT_QUERIES,
    concurrency: Concurrency = 8,
    duration: Duration = 30.0,
    warmup: Warmup = 5.0,
    out: Annotated[Path, typer.Option(help="Where to write the JSON report.")] = Path(
        "results/scale.json"
    ),
    profile: Annotated[
        bool,
        typer.Option(
            help="Sample the stores' process (py-spy --gil) and the API's process through each "
            "size's run, and report each one's work in ms a request (bench/scale_profile.py)."
        ),
    ] = False,
    replicas: Annotated[
        int,
        typer.Option(
            min=0,
            max=8,
            help="Search replicas beside the stores' process (RAGBUS_SEARCH_REPLICAS); each "
            "size is measured once they serve from a current copy.",
        ),
    ] = 0,
    verbose: Verbose = False,
) -> None:
    """Per-channel search and end-to-end latency as the corpus grows: each size is built once
    from an ingested namespace (perturbed copies: bench/scale.py says how), then served by
    its own `ragbus up` and loaded like `ragbus bench`."""
    from bench.load import load_queries
    from bench.scale import measure, ratios, size_label, table, too_big

    settings = Settings()
    interactive_logging(settings, verbose)
    source_dir = source or settings.data_dir
    root = work_dir or source_dir / "scale"
    try:
        targets = [_chunk_count(size) for size in sizes.split(",") if size.strip()]
    except ValueError as exc:
        errors.print(f"--sizes: {exc}")
        raise typer.Exit(2) from None
    texts = load_queries(queries)
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for target in targets:
        reason = too_big(rows, target)
        if reason is not None:
            errors.print(f"[yellow]{size_label(target)} left out:[/yellow] {reason}")
            skipped.append({"size": size_label(target), "skipped": reason})
            continue
        corpus_dir = root / size_label(target)
        built = corpus_dir / "scale.json"
        if not built.exists():
            if corpus_dir.exists():
                errors.print(f"{corpus_dir} holds a build that did not finish: remove it first")
                raise typer.Exit(1)
            _build_scaled(source_dir, namespace, target, corpus_dir)
        row = asyncio.run(
            measure(
                corpus_dir,
                texts,
                concurrency=concurrency,
                duration_s=duration,
                warmup_s=warmup,
                namespace=namespace,
                profile=profile,
                replicas=replicas,
            )
        )
        row["size"] = size_label(target)
        if profile:
            _print_profile(row)
        rows.append(row)
        console.print(table(rows))
        save_json(_report(rows, skipped), out)  # each size as it is measured
    if skipped and rows:
        save_json(_report(rows, skipped), out)
    for size, against in ratios(rows).items():
        console.print(
            f"{size} against {rows[0].get('size')}: q/s {_times(against['throughput'])}, "
            f"p95 {_times(against['p95'])}, the stores' CPU a request "
            f"{_times(against['stores_cpu_per_request'])}"
        )
    console.print(f"wrote {out}")


def _print_profile(row: dict[str, Any]) -> None:
    for key, who in (("stores_gil", "the stores' process"), ("replica_gil", "its replica")):
        held = row["profile"].get(key)
        if held is None:
            continue
        console.print(
            f"{row['size']}: {who} held its GIL {held['gil_busy']:.0%} of the time, "
            f"{held['gil_ms_per_request']:.1f} ms a request:"
        )
        for work in held["by_work"]:
            console.print(f"  {work['gil_ms_per_request']:6.2f} ms  {work['name']}")


def _report(rows: list[dict[str, Any]], skipped: list[dict[str, str]]) -> dict[str, Any]:
    from bench.scale import ratios, table

    return {"sizes": rows, "table": table(rows), "ratios": ratios(rows), "skipped": skipped}


def _times(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _build_scaled(source_dir: Path, namespace: str, target: int, corpus_dir: Path) -> None:
    """One corpus size, built with a progress bar per stage (read, write, optimize, ...)."""
    from rich.progress import Progress

    from bench.scale import size_label
    from bench.scale_build import build_corpus

    with Progress(console=console) as bar:
        tasks: dict[str, Any] = {}

        def advance(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(f"{size_label(target)} {stage}", total=total)
            bar.update(tasks[stage], completed=done, total=total)

        build_corpus(source_dir, namespace, target, corpus_dir, progress=advance)


def _chunk_count(size: str) -> int:
    size = size.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(size[-1:], 1)
    value = float(size[:-1] if scale > 1 else size) * scale
    if value < 1:
        raise ValueError(f"{size!r} is not a corpus size")
    return int(value)


def bench_scaleout(
    queries: Queries = DEFAULT_QUERIES,
    concurrency: Concurrency = 8,
    duration: Duration = 30.0,
    warmup: Warmup = 10.0,
    nats_nodes: Annotated[int, typer.Option(min=1, max=5, help="NATS cluster nodes.")] = 3,
    out: Annotated[Path, typer.Option(help="Where to write the JSON report.")] = Path(
        "results/scaleout.json"
    ),
) -> None:
    """Every role in its own processes on a fresh NATS cluster (streams on three nodes) and
    redis-server: the sample corpus ingested, then the same load with 1 and with 2 processes
    of each stateless role (orchestrator, classify, generate, critic) beside one store-owning
    worker. Prints q/s, latency and CPU a request, and where the CPU went by role."""
    from bench.load import load_queries
    from bench.scaleout import bench_scaleout as run

    interactive_logging(Settings(), verbose=False)
    console.print(f"bench-scaleout: {nats_nodes} NATS nodes, c = {concurrency}, {duration:g} s")
    report = asyncio.run(
        run(
            load_queries(queries),
            concurrency=concurrency,
            duration_s=duration,
            warmup_s=warmup,
            nats_nodes=nats_nodes,
        )
    )
    save_json(report, out)
    print_scaleout(report)
    console.print(f"wrote {out}")


def print_scaleout(report: dict[str, Any]) -> None:
    from rich.table import Table

    runs = report["runs"]
    table = Table(
        title=f"stateless roles scaled out ({report['nats_nodes']} NATS nodes, "
        f"c = {report['concurrency']})"
    )
    table.add_column("")
    for run_ in runs:
        table.add_column(f"{run_['processes_per_stateless_role']} a role", justify="right")
    rows = {
        "q/s": lambda r: f"{r['throughput_qps']:.1f}",
        "p50 ms": lambda r: f"{r['latency_ms']['p50'] or 0:,.0f}",
        "p95 ms": lambda r: f"{r['latency_ms']['p95'] or 0:,.0f}",
        "CPU ms a request": lambda r: f"{r['cpu_ms_per_request'] or 0:.1f}",
        "cores busy": lambda r: f"{r['server_cores_busy'] or 0:.2f}",
    }
    for name, cell in rows.items():
        table.add_row(name, *(cell(r) for r in runs))
    for role in runs[0]["cpu_ms_per_request_by_role"]:
        table.add_row(
            f"  {role}, CPU ms a request",
            *(f"{r['cpu_ms_per_request_by_role'].get(role, 0):.1f}" for r in runs),
        )
    console.print(table)
