"""`ragbus bench|bench-bus|bench-ingest`: load, the in-process peers, the bus's own cost and
ingestion, each printing its figures and writing a JSON report (`results/`). The measuring is
`bench`'s; this module parses options and prints."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from bench.load import AskPath
from cli.common import (
    DEFAULT_API,
    DEFAULT_QUERIES,
    ApiUrl,
    Concurrency,
    Duration,
    Queries,
    Token,
    Verbose,
    Warmup,
    check_api,
    console,
    errors,
    filter_option,
    interactive_logging,
    save_json,
    store_namespace,
)
from infra.settings import Settings

Ask = Annotated[
    AskPath,
    typer.Option(
        help="How each loop asks: `chat`, one request that submits and streams the events "
        "(POST /v1/chat); `submit`, POST /v1/queries then GET its events (the web page's way).",
    ),
]


def register(app: typer.Typer) -> None:
    app.command()(bench)
    app.command("bench-bus")(bench_bus)
    app.command("bench-ingest")(bench_ingest)


def bench(
    queries: Queries = DEFAULT_QUERIES,
    concurrency: Concurrency = 4,
    duration: Duration = 30.0,
    warmup: Warmup = 0.0,
    timeout: Annotated[float, typer.Option(help="Per-request seconds before `unfinished`.")] = 60.0,
    namespace: Annotated[
        str | None, typer.Option(help="Where the queries search (default: the API's).")
    ] = None,
    peer: Annotated[
        bool,
        typer.Option(
            help="Then load the in-process peer retriever (bench/peer.py) over a copy of the "
            "same namespace's embedded store, for as long, and report the ratio."
        ),
    ] = True,
    same_work_peer: Annotated[
        bool,
        typer.Option(
            help="Then load the same-work peer (bench/same_work.py): ragbus's own engines "
            "(classify, the four channels, fusion, extractive generation, the critic) in this "
            "process, without the bus, over copies of the same stores, for as long; report the "
            "ratio (the design's own cost)."
        ),
    ] = True,
    peer_threads: Annotated[int, typer.Option(min=1, help="Each peer's threads.")] = 8,
    ask: Ask = AskPath.CHAT,
    filter: Annotated[
        str | None,
        typer.Option(
            "--filter",
            help="Every question with this metadata filter (JSON; docs/usage.md, Filters), "
            "alternated with the same load unfiltered for --rounds rounds, and the ratios "
            "reported; the same-work peer gets the filter too, the retrieval-only peer is "
            "skipped (it has none).",
        ),
    ] = None,
    rounds: Annotated[
        int, typer.Option(min=1, help="With --filter: unfiltered and filtered loads, in turns.")
    ] = 2,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
    out: Annotated[Path, typer.Option(help="Where to write the JSON report.")] = Path(
        "results/bench.json"
    ),
) -> None:
    """Drive the running API with C concurrent loops for S seconds; report latencies, CPU per
    request, and the same figures for the in-process peers on the same corpus: the
    retrieval-only one and the one running ragbus's own engines without the bus."""
    from bench.load import load_queries, print_report, run_bench

    settings = Settings()
    interactive_logging(settings, verbose=False)
    narrowed = filter_option(filter)
    check_api(api, token)  # before the load: it answers, and takes the token
    texts = load_queries(queries)

    def load(narrowing: dict[str, Any] | None) -> dict[str, Any]:
        return asyncio.run(
            run_bench(
                api,
                texts,
                concurrency=concurrency,
                duration_s=duration,
                warmup_s=warmup,
                token=token,
                timeout_s=timeout,
                namespace=namespace,
                ask=ask,
                narrowed=narrowing,
            )
        )

    report = load(None) if narrowed is None else _against_unfiltered(load, narrowed, rounds)
    report["namespace"] = namespace or "default"
    print_report(report, console)
    if narrowed is not None:
        _print_versus(report["vs_unfiltered"])
    if peer and narrowed is not None:
        report["peer"] = {"skipped": "the retrieval-only peer has no metadata filter"}
        errors.print("[yellow]peer skipped:[/yellow] it has no metadata filter")
    elif peer:
        report["peer"], report["vs_peer"] = _bench_peer(
            settings, report, texts, peer_threads, duration, warmup
        )
    if same_work_peer:
        report["same_work_peer"], report["vs_same_work_peer"] = _bench_same_work(
            settings, report, texts, peer_threads, duration, warmup
        )
    save_json(report, out)
    console.print(f"wrote {out}")


def _against_unfiltered(load: Any, narrowed: dict[str, Any], rounds: int) -> dict[str, Any]:
    """The filtered load and the same load unfiltered, in turns for `rounds` rounds (a
    machine's drift falls on both alike); the last filtered run's report, with the last
    unfiltered one and each round's ratios (filtered / unfiltered) and their medians."""
    import statistics

    pairs = []
    for n in range(rounds):
        console.print(f"round {n + 1} of {rounds}: unfiltered, then filtered")
        pairs.append((load(None), load(narrowed)))
    ratios = [
        {
            "p95_ratio": _ratio(f["latency_ms"]["p95"], u["latency_ms"]["p95"]),
            "p50_ratio": _ratio(f["latency_ms"]["p50"], u["latency_ms"]["p50"]),
            "throughput_ratio": _ratio(f["throughput_qps"], u["throughput_qps"]),
            "unfiltered_p95_ms": u["latency_ms"]["p95"],
            "filtered_p95_ms": f["latency_ms"]["p95"],
        }
        for u, f in pairs
    ]
    plain, report = pairs[-1]
    report["unfiltered"] = plain
    report["vs_unfiltered"] = {
        "rounds": ratios,
        **{
            key: round(statistics.median(r[key] for r in ratios if r[key] is not None), 3)
            for key in ("p95_ratio", "p50_ratio", "throughput_ratio")
            if any(r[key] is not None for r in ratios)
        },
    }
    return report


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return round(top / bottom, 3) if top is not None and bottom else None


def _print_versus(versus: dict[str, Any]) -> None:
    console.print(
        f"filtered / unfiltered, median of {len(versus['rounds'])} rounds: p95 "
        f"{versus.get('p95_ratio')}×, p50 {versus.get('p50_ratio')}×, q/s "
        f"{versus.get('throughput_ratio')}×"
    )


def _bench_peer(
    settings: Settings,
    ragbus: dict[str, Any],
    queries: list[str],
    threads: int,
    duration: float,
    warmup: float,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The peer's run and ragbus's ratio to it, or (a reason, None) when it cannot run."""
    from bench.peer import PeerRetriever, compare, print_comparison, run_peer

    namespace = ragbus["namespace"]
    try:
        with console.status(f"loading the peer over a copy of {namespace!r}"):
            retriever = PeerRetriever.from_store_copy(settings, namespace)
    except (ValueError, OSError) as exc:
        errors.print(f"[yellow]peer skipped:[/yellow] {exc}")
        return {"skipped": str(exc)}, None
    try:
        peer_report = run_peer(
            retriever, queries, threads=threads, duration_s=duration, warmup_s=warmup
        )
    finally:
        retriever.close()
    ratio = compare(ragbus, peer_report)
    print_comparison(ragbus, peer_report, ratio, console)
    return peer_report, ratio


def _bench_same_work(
    settings: Settings,
    ragbus: dict[str, Any],
    queries: list[str],
    threads: int,
    duration: float,
    warmup: float,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The same-work peer's run and ragbus's ratio to it, or (a reason, None)."""
    from bench.same_work import bench_same_work

    peer_report, ratio = bench_same_work(
        settings,
        ragbus,
        queries,
        threads=threads,
        duration_s=duration,
        warmup_s=warmup,
        console=console,
    )
    if "skipped" in peer_report:
        errors.print(f"[yellow]same-work peer skipped:[/yellow] {peer_report['skipped']}")
    return peer_report, ratio


def bench_bus(
    queries: Queries = DEFAULT_QUERIES,
    concurrency: Concurrency = 8,
    duration: Duration = 30.0,
    warmup: Warmup = 5.0,
    out: Annotated[Path, typer.Option(help="Where to write the JSON report.")] = Path(
        "results/bus.json"
    ),
    floor: Annotated[
        bool, typer.Option(help="Also run the floor: the same messages in plain nats-py.")
    ] = True,
    profile: Annotated[
        bool,
        typer.Option(help="Sample the stack with py-spy under load: where a request's CPU goes."),
    ] = False,
    ask: Ask = AskPath.CHAT,
) -> None:
    """The broker path's own cost: the real API, saga, workers, nats-server and Redis, with
    instant engines (no model, no store), started on free ports and stopped afterwards; then
    the floor, the same message pattern in plain nats-py and redis-py, in the same run."""
    from bench.bus import bench_bus as run
    from bench.bus_report import print_floor, print_ledger
    from bench.load import load_queries, print_report

    interactive_logging(Settings(), verbose=False)
    report = asyncio.run(
        run(
            load_queries(queries),
            concurrency=concurrency,
            duration_s=duration,
            warmup_s=warmup,
            floor=floor,
            profile=profile,
            ask=ask,
        )
    )
    save_json(report, out)
    print_report(report, console)
    print_floor(report, console)
    print_ledger(report, console)
    console.print(f"wrote {out}")


def bench_ingest(
    path: Annotated[
        Path, typer.Argument(exists=True, help="Documents: a folder, file or BEIR corpus.jsonl.")
    ],
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N documents.")] = None,
    namespace: Annotated[
        str, typer.Option(help="Where to index them.", callback=store_namespace)
    ] = "bench-ingest",
    out: Annotated[Path, typer.Option(help="Where to write the JSON report.")] = Path(
        "results/ingest.json"
    ),
    verbose: Verbose = False,
) -> None:
    """Measure the whole ingest pipeline (chunk, dense, sparse, entities, graph, upsert) as the
    running ingest workers do it: chunks per minute from publish to the job's completion; then
    the encoder alone over the same chunks in this process, and the pipeline's ratio to it."""
    import time
    from itertools import islice

    from bench.ingest import compare, encoder_alone, print_comparison
    from cli.ingest_job import ingest_and_follow
    from infra.runtime.ingest_producer import load_documents

    settings = Settings()
    interactive_logging(settings, verbose)
    documents = [
        doc.model_copy(update={"namespace": namespace})
        for doc in islice(load_documents(path), limit)
    ]
    started = time.perf_counter()
    _, final = asyncio.run(
        ingest_and_follow(settings, documents, console, timeout_s=6 * 3600, require_worker=True)
    )
    seconds = time.perf_counter() - started
    if final is None or final.get("status") != "completed":
        errors.print(f"ingest did not complete: {final or 'no progress events'}")
        raise typer.Exit(1)
    indexed = final.get("documents_done", 0)
    report = {
        "documents": len(documents),
        "documents_indexed": indexed,
        "documents_unchanged": final.get("documents_unchanged", 0),
        "chunks": final.get("chunks", 0),
        "entities": final.get("entities", 0),
        "seconds": round(seconds, 2),
        "chunks_per_minute": round(final.get("chunks", 0) / seconds * 60, 1),
        "documents_per_second": round(indexed / seconds, 2),
    }
    if report["documents_unchanged"]:
        errors.print("some documents were already indexed (unchanged): use a fresh --namespace")
    with console.status("the encoder alone over the same chunks"):
        report.update(compare(report, encoder_alone(settings, documents)))
    console.print_json(json.dumps(report))
    print_comparison(report, console)
    save_json(report, out)
