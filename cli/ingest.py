"""`ragbus ingest`: publish documents as an ingest job on the bus and follow it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from cli.common import Verbose, console, errors, interactive_logging, store_namespace
from infra.settings import Settings


def register(app: typer.Typer) -> None:
    app.command()(ingest)


def ingest(
    path: Annotated[Path, typer.Argument(exists=True, help="A file or a directory of documents.")],
    namespace: Annotated[
        str | None, typer.Option(help="Put every document here.", callback=store_namespace)
    ] = None,
    job_id: Annotated[str | None, typer.Option(help="Job id (default: a new one).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for completion.")] = 600.0,
    verbose: Verbose = False,
) -> None:
    """Publish documents as an ingest job and follow it until it completes."""
    from cli.ingest_job import describe, ingest_and_follow
    from infra.runtime.ingest_producer import DocumentTooLarge, load_documents

    settings = Settings()
    interactive_logging(settings, verbose)
    documents = list(load_documents(path))
    if namespace:
        documents = [doc.model_copy(update={"namespace": namespace}) for doc in documents]
    if not documents:
        errors.print(f"no documents found in {path}")
        raise typer.Exit(1)
    try:
        _, final = asyncio.run(
            ingest_and_follow(settings, documents, console, job_id=job_id, timeout_s=timeout)
        )
    except DocumentTooLarge as exc:
        errors.print(f"nothing was published: {exc}")
        raise typer.Exit(1) from None
    if final is None or final.get("status") != "completed":
        errors.print(f"ingest did not complete: {final or 'no progress events'}")
        raise typer.Exit(1)
    console.print(describe(final))
