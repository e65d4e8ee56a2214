"""`ragbus eval|bench-conversations|bench-research|bench-critic`: retrieval and answers scored
through the running API on BEIR-format data (`bench.evaluation`), each writing a JSON report.
The corpus is ingested over the bus (`cli.ingest_job`), handed to the harness."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from cli.common import (
    DEFAULT_API,
    ApiUrl,
    Token,
    Verbose,
    check_api,
    console,
    errors,
    interactive_logging,
    save_json,
)
from contracts.ingest import DocumentIn
from infra.settings import Settings

Concurrency = Annotated[int, typer.Option("--concurrency", "-c", min=1)]


async def ingest_to_workers(
    settings: Settings,
    documents: Sequence[DocumentIn],
    console: Console,
    *,
    timeout_s: float = 600.0,
) -> tuple[Any, dict[str, Any] | None]:
    """`cli.ingest_job.ingest_and_follow` that first makes sure an ingest worker is running;
    imported when an ingest runs (it loads the bus)."""
    from cli.ingest_job import ingest_and_follow

    return await ingest_and_follow(
        settings, documents, console, timeout_s=timeout_s, require_worker=True
    )


def register(app: typer.Typer) -> None:
    """`eval` (listed beside `ask`)."""
    app.command("eval")(eval_command)


def register_benches(app: typer.Typer) -> None:
    """The `bench-*` commands that score answers (listed after the other benchmarks)."""
    app.command("bench-conversations")(bench_conversations)
    app.command("bench-research")(bench_research)
    app.command("bench-critic")(bench_critic)


def eval_command(
    beir: Annotated[Path, typer.Option(exists=True, file_okay=False, help="A BEIR directory.")],
    split: Annotated[str, typer.Option(help="qrels/<split>.tsv to score.")] = "test",
    namespace: Annotated[str | None, typer.Option(help="Default: the directory's name.")] = None,
    skip_ingest: Annotated[bool, typer.Option(help="Reuse what is already indexed.")] = False,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1)] = 4,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N queries.")] = None,
    out: Annotated[Path | None, typer.Option(help="JSON report.")] = None,
    run: Annotated[Path | None, typer.Option(help="Fused ranking, TREC run format.")] = None,
    run_channel: Annotated[
        list[str] | None,
        typer.Option(help="NAME=FILE: one channel's ranking, TREC run format (repeatable)."),
    ] = None,
    requests_out: Annotated[
        Path | None,
        typer.Option(
            help="JSON lines: each query's intent, weights and every channel's chunk ranking "
            "(for `python -m studies.fusion_study`)."
        ),
    ] = None,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
    verbose: Verbose = False,
) -> None:
    """Score retrieval on a BEIR data set through the running pipeline (nDCG@10, Recall, MRR)."""
    from bench.evaluation.harness import evaluate_beir
    from bench.evaluation.metrics import write_trec_run
    from client import RagbusClient

    settings = Settings()
    interactive_logging(settings, verbose)
    check_api(api, token)  # before any ingestion or load: it answers, and takes the token

    async def go() -> tuple[dict[str, Any], Any]:
        async with RagbusClient(api, token=token) as client:
            return await evaluate_beir(
                settings,
                client,
                beir,
                console,
                ingest_job=ingest_to_workers,
                split=split,
                namespace=namespace,
                ingest=not skip_ingest,
                concurrency=concurrency,
                limit=limit,
            )

    report, result = asyncio.run(go())
    console.print_json(json.dumps(report))
    if out:
        save_json(report, out)
    if run:
        write_trec_run(result.fused, str(run), "ragbus-fused")
    if requests_out:
        requests_out.parent.mkdir(parents=True, exist_ok=True)
        with requests_out.open("w", encoding="utf-8") as fh:
            for qid, request in sorted(result.requests.items()):
                fh.write(json.dumps({"qid": qid, **request}) + "\n")
    for spec in run_channel or []:
        name, _, path = spec.partition("=")
        if name not in result.channels or not path:
            errors.print(
                f"--run-channel wants NAME=FILE with NAME one of "
                f"{', '.join(sorted(result.channels))}; got {spec!r}"
            )
            raise typer.Exit(2)
        write_trec_run(result.channels[name], path, f"ragbus-{name}")


def bench_conversations(
    conversations: Annotated[
        Path, typer.Option(exists=True, dir_okay=False, help="JSONL of conversations.")
    ] = Path("bench/conversations.jsonl"),
    beir: Annotated[
        Path, typer.Option(exists=True, file_okay=False, help="The BEIR set they are about.")
    ] = Path("../shared/data/musique_train100"),
    namespace: Annotated[str | None, typer.Option(help="Default: the set's name.")] = None,
    skip_ingest: Annotated[bool, typer.Option(help="Reuse what is already indexed.")] = False,
    concurrency: Concurrency = 4,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
    out: Annotated[Path, typer.Option(help="Where to write the JSON report.")] = Path(
        "results/conversations.json"
    ),
    verbose: Verbose = False,
) -> None:
    """Follow-up questions' retrieval (Recall@10, nDCG@10) in their conversation, without it,
    and for the standalone reference question (the ceiling), through the running API."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from bench.evaluation.beir import load_beir
    from bench.evaluation.conversations import load_conversations, run_conversations
    from bench.evaluation.harness import default_namespace, ingest_set
    from client import RagbusClient

    settings = Settings()
    interactive_logging(settings, verbose)
    check_api(api, token)  # before any ingestion or load: it answers, and takes the token
    talks = load_conversations(conversations)
    where = namespace or default_namespace(beir)

    async def go() -> dict[str, Any]:
        if not skip_ingest:
            await ingest_set(settings, load_beir(beir, "test"), where, console, ingest_to_workers)
        columns = (TextColumn("conversations"), BarColumn(), MofNCompleteColumn())
        async with RagbusClient(api, token=token) as client:
            with Progress(*columns, console=console, transient=True) as bar:
                task = bar.add_task("conversations", total=len(talks))
                run = await run_conversations(
                    client,
                    talks,
                    where,
                    concurrency=concurrency,
                    progress=lambda: bar.advance(task),
                )
        report = run.report()
        report.update({"conversations": len(talks), "file": str(conversations), "namespace": where})
        return report

    report = asyncio.run(go())
    shown = {k: v for k, v in report.items() if k != "rewrites"}
    console.print_json(json.dumps(shown))
    save_json(report, out)


def bench_research(
    beir: Annotated[
        Path, typer.Option(exists=True, file_okay=False, help="A BEIR set with answers.")
    ] = Path("../shared/data/musique_train100"),
    split: Annotated[str, typer.Option(help="qrels/<split>.tsv to score.")] = "test",
    namespace: Annotated[str | None, typer.Option(help="Default: the set's name.")] = None,
    skip_ingest: Annotated[bool, typer.Option(help="Reuse what is already indexed.")] = False,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N questions.")] = None,
    concurrency: Concurrency = 2,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
    out: Annotated[Path, typer.Option(help="Where to write the JSON report.")] = Path(
        "results/research.json"
    ),
    verbose: Verbose = False,
) -> None:
    """Research mode against a normal request on the same questions: reference answers found,
    supporting documents among the cited ones, latency and child requests."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from bench.evaluation.beir import load_beir
    from bench.evaluation.harness import default_namespace, ingest_set
    from bench.evaluation.research import run_research
    from client import RagbusClient

    settings = Settings()
    interactive_logging(settings, verbose)
    check_api(api, token)  # before any ingestion or load: it answers, and takes the token
    data = load_beir(beir, split)
    if limit is not None:
        data = data.first(limit)
    where = namespace or default_namespace(beir)

    async def go() -> dict[str, Any]:
        if not skip_ingest:
            await ingest_set(settings, data, where, console, ingest_to_workers)
        columns = (TextColumn("questions"), BarColumn(), MofNCompleteColumn())
        async with RagbusClient(api, token=token) as client:
            with Progress(*columns, console=console, transient=True) as bar:
                task = bar.add_task("questions", total=len(data.queries))
                run = await run_research(
                    client,
                    data,
                    where,
                    concurrency=concurrency,
                    progress=lambda: bar.advance(task),
                )
        report = run.report()
        report.update({"dataset": str(beir), "split": split, "namespace": where})
        return report

    report = asyncio.run(go())
    console.print_json(json.dumps(report))
    save_json(report, out)


def bench_critic(
    beir: Annotated[Path, typer.Option(exists=True, file_okay=False, help="A BEIR directory.")],
    split: Annotated[str, typer.Option(help="qrels/<split>.tsv (use a development split).")] = (
        "dev"
    ),
    namespace: Annotated[str | None, typer.Option(help="Default: the directory's name.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N queries.")] = None,
    concurrency: Concurrency = 4,
    out: Annotated[Path, typer.Option(help="JSON report.")] = Path("results/critic.json"),
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
    verbose: Verbose = False,
) -> None:
    """Does the critic's retry earn its cost? First vs last attempt of every retried request
    through the full loop: recall against the qrels at the first attempt's depth, reference
    answers found (when the queries carry them), support scores, confidence, latency; for all
    retried requests, per strategy, and for those whose first attempt missed a relevant
    document. The data set must already be indexed (`ragbus eval` does that)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from bench.evaluation.beir import load_beir
    from bench.evaluation.critic_loop import run_loop, summarise
    from bench.evaluation.harness import default_namespace
    from client import RagbusClient

    interactive_logging(Settings(), verbose)
    check_api(api, token)  # before any load: it answers, and takes the token
    data = load_beir(beir, split)
    if limit is not None:
        data = data.first(limit)

    async def go() -> dict[str, Any]:
        async with RagbusClient(api, token=token) as client:
            with Progress(
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            ) as bar:
                task = bar.add_task("asking", total=len(data.queries))
                run = await run_loop(
                    client,
                    data,
                    namespace or default_namespace(beir),
                    concurrency=concurrency,
                    progress=lambda: bar.advance(task),
                )
        return summarise(run, data)

    report = asyncio.run(go())
    console.print_json(json.dumps(report))
    save_json(report, out)
