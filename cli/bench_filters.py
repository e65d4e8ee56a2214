"""`ragbus bench-filters`: filtered requests held to their filter on a running API
(`bench.filters`), its figures printed and saved."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from cli.common import (
    DEFAULT_API,
    DEFAULT_QUERIES,
    ApiUrl,
    Concurrency,
    Queries,
    Token,
    check_api,
    console,
    errors,
    interactive_logging,
    save_json,
)
from infra.settings import Settings


def register(app: typer.Typer) -> None:
    app.command("bench-filters")(bench_filters)


def bench_filters(
    corpus: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="A BEIR corpus.jsonl.")
    ],
    namespace: Annotated[str, typer.Option(help="Where the corpus goes and is asked.")] = (
        "filters"
    ),
    limit: Annotated[int | None, typer.Option(min=1, help="The corpus's first N documents.")] = (
        None
    ),
    filters: Annotated[int, typer.Option(min=1, help="Random filters asked.")] = 1000,
    top_k: Annotated[int, typer.Option(min=1, max=100)] = 10,
    concurrency: Concurrency = 8,
    seed: Annotated[int, typer.Option(help="The filters' and questions' seed.")] = 56,
    queries: Queries = DEFAULT_QUERIES,
    ingest: Annotated[
        bool, typer.Option(help="Send the corpus first (unchanged documents cost little).")
    ] = True,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
    out: Annotated[Path, typer.Option(help="Where to write the JSON report.")] = Path(
        "results/bench-filters.json"
    ),
) -> None:
    """Give a corpus metadata drawn from each document's id, ingest it, then ask random
    filters in `retrieve` mode and check every passage of every channel against the filter,
    and that `top_k` is full whenever enough chunks pass. Exits 1 on any miss."""
    from bench.filters import corpus_documents, run_filters
    from bench.filters import ingest as send
    from bench.load import load_queries
    from client import RagbusClient
    from contracts.ingest import DocumentIn
    from infra.retrieval.chunking import chunk_document

    settings = Settings()
    interactive_logging(settings, verbose=False)
    check_api(api, token)
    documents = list(corpus_documents(corpus, namespace, limit))
    chunk_counts = {
        doc["id"]: len(
            chunk_document(
                DocumentIn.model_validate(doc), settings.chunk_chars, settings.chunk_overlap_chars
            )
        )
        for doc in documents
    }
    metadata = {doc["id"]: doc["metadata"] for doc in documents}
    if ingest:

        async def sending() -> dict[str, int]:
            async with RagbusClient(api, token=token, timeout=120) as client:
                return await send(client, documents)

        with console.status(f"ingesting {len(documents):,} documents into {namespace!r}"):
            sent = asyncio.run(sending())
        console.print(f"ingested: {sent}")
    report = asyncio.run(
        run_filters(
            api,
            load_queries(queries),
            chunk_counts,
            metadata,
            namespace=namespace,
            filters=filters,
            top_k=top_k,
            concurrency=concurrency,
            seed=seed,
            token=token,
        )
    )
    print_filters(report)
    save_json(report, out)
    console.print(f"wrote {out}")
    if report["requests_with_passages_outside"] or report["requests_short_of_top_k"]:
        errors.print("goals missed: a passage outside its filter, or top_k short")
        raise typer.Exit(1)


def print_filters(report: dict[str, Any]) -> None:
    table = Table(title="ragbus bench-filters", show_header=False)
    shares = report["kept_share"]
    rows = [
        (
            "corpus",
            f"{report['documents']:,} documents, {report['chunks']:,} chunks in "
            f"{report['namespace']!r}",
        ),
        (
            "filters",
            f"{report['filters']:,} random (seed {report['seed']}), top_k {report['top_k']}, "
            f"c = {report['concurrency']}; statuses {report['statuses']}",
        ),
        (
            "documents kept",
            f"median {shares['median']:.1%}, min {shares['min']:.1%}, max {shares['max']:.1%}; "
            f"{shares['none_kept']} filters keep none",
        ),
        (
            "passages outside the filter",
            f"{report['requests_with_passages_outside']} requests, over "
            f"{report['passages_checked']:,} fused and {report['channel_passages_checked']:,} "
            "channel passages",
        ),
        ("top_k short", f"{report['requests_short_of_top_k']} requests"),
        (
            "latency",
            f"p50 {report['latency_ms']['p50']} ms, p95 {report['latency_ms']['p95']} ms; "
            f"{report['elapsed_s']} s",
        ),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
