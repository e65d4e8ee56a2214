"""`ragbus eval`: ingest a BEIR set through the bus (or reuse it), query it, score it."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from api.client import RagbusClient
from api.evaluation.beir import BeirSet, load_beir
from api.evaluation.runner import EvalRun, run_queries
from api.ingest_job import ingest_and_follow
from infra.runtime.ingest_producer import load_documents
from infra.settings import Settings


def default_namespace(root: Path) -> str:
    """A namespace named after the data set, so evaluations never mix with other documents."""
    name = re.sub(r"[^a-z0-9_-]+", "-", root.resolve().name.lower()).strip("-_") or "eval"
    return name[:63]


async def ingest_set(
    settings: Settings, beir: BeirSet, namespace: str, console: Console
) -> dict[str, Any]:
    """Publish the corpus as one job; unchanged documents are recognised and skipped."""
    documents = [
        d.model_copy(update={"namespace": namespace}) for d in load_documents(beir.corpus_path)
    ]
    started = time.perf_counter()
    _, final = await ingest_and_follow(settings, documents, console, timeout_s=6 * 3600)
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
    ingested = await ingest_set(settings, beir, namespace, console) if ingest else None
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
