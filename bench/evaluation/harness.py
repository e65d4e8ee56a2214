"""`ragbus eval`: ingest a BEIR set through the bus (or reuse it), query it, score it.

Publishing and following the ingest job is the caller's (`IngestJob`: the CLI hands in
`cli.ingest_job.ingest_and_follow`), so the harness needs only the HTTP client."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench.evaluation.beir import BeirSet, load_beir
from bench.evaluation.runner import EvalRun, run_queries
from client import RagbusClient
from contracts.ingest import DocumentIn
from infra.runtime.ingest_producer import load_documents
from infra.settings import Settings


class IngestJob(Protocol):
    """Publish documents as one ingest job and follow it: `(receipt, last progress data)`."""

    async def __call__(
        self,
        settings: Settings,
        documents: Sequence[DocumentIn],
        console: Console,
        *,
        timeout_s: float,
    ) -> tuple[Any, dict[str, Any] | None]: ...


def default_namespace(root: Path) -> str:
    """A namespace named after the data set, so evaluations never mix with other documents."""
    name = re.sub(r"[^a-z0-9_-]+", "-", root.resolve().name.lower()).strip("-_") or "eval"
    return name[:63]


async def ingest_set(
    settings: Settings, beir: BeirSet, namespace: str, console: Console, ingest_job: IngestJob
) -> dict[str, Any]:
    """Publish the corpus as one job; unchanged documents are recognised and skipped."""
    documents = [
        d.model_copy(update={"namespace": namespace}) for d in load_documents(beir.corpus_path)
    ]
    started = time.perf_counter()
    _, final = await ingest_job(settings, documents, console, timeout_s=6 * 3600)
    if final is None or final.get("status") != "completed":
        raise RuntimeError(f"ingest did not complete: {final or 'no progress events'}")
    elapsed = time.perf_counter() - started
    return {
        **final,
        "seconds": round(elapsed, 1),
        "chunks_per_minute": round(final.get("chunks", 0) / elapsed * 60, 1),
    }


async def evaluate_beir(
    settings: Settings,
    client: RagbusClient,
    root: Path,
    console: Console,
    *,
    ingest_job: IngestJob,
    split: str = "test",
    namespace: str | None = None,
    ingest: bool = True,
    concurrency: int = 4,
    limit: int | None = None,
) -> tuple[dict[str, Any], EvalRun]:
    beir = load_beir(root, split)
    if limit is not None:
        beir = beir.first(limit)
    namespace = namespace or default_namespace(root)
    ingested = await ingest_set(settings, beir, namespace, console, ingest_job) if ingest else None
    columns = (TextColumn("querying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("queries", total=len(beir.queries))
        run = await run_queries(
            client, beir, namespace, concurrency=concurrency, progress=lambda: bar.advance(task)
        )
    report = run.report(beir)
    report.update({"dataset": str(root), "split": split, "namespace": namespace})
    if ingested is not None:
        report["ingest"] = ingested
    return report, run
