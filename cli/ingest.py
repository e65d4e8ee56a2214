"""`ragbus ingest`: publish documents as an ingest job on the bus and follow it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from cli.common import (
    INTERRUPTED,
    Failure,
    Verbose,
    console,
    errors,
    interactive_logging,
    store_namespace,
)
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
    """Publish documents as an ingest job and follow it until it completes. It reads .md,
    .markdown and .txt files, folders of them, and BEIR corpus .jsonl files; an ingest worker
    (`ragbus up`, or `ragbus worker ingest`) must be running."""
    from cli.ingest_job import describe, ingest_and_follow
    from contracts.envelope import new_request_id
    from infra.runtime.ingest_producer import (
        KINDS_READ,
        DocumentTooLarge,
        NotDocuments,
        load_documents,
    )

    settings = Settings()
    interactive_logging(settings, verbose)
    try:
        documents = list(load_documents(path))
    except NotDocuments as exc:
        raise Failure(str(exc)) from exc
    if namespace:
        documents = [doc.model_copy(update={"namespace": namespace}) for doc in documents]
    if not documents:
        raise Failure(f"no documents in {path}: ragbus reads {KINDS_READ} (empty files skipped)")
    job = job_id or new_request_id()  # known here, so that Ctrl-C can name it
    sent = [0]

    def count(published: int) -> None:
        sent[0] = published

    try:
        _, final = asyncio.run(
            ingest_and_follow(
                settings,
                documents,
                console,
                job_id=job,
                timeout_s=timeout,
                require_worker=True,
                published=count,
            )
        )
    except DocumentTooLarge as exc:
        raise Failure(f"nothing was published: {exc}") from exc
    except KeyboardInterrupt:
        raise Failure(_interrupted(job, sent[0], len(documents), path), INTERRUPTED) from None
    if final is None or final.get("status") != "completed":
        errors.print(f"ingest did not complete: {final or 'no progress events'}")
        raise typer.Exit(1)
    console.print(describe(final))


def _interrupted(job: str, sent: int, total: int, path: Path) -> str:
    """What Ctrl-C left behind: the documents published stay on the bus, and are indexed."""
    if not sent:
        return f"interrupted before any document of job {job} was published: nothing changed"
    if sent < total:
        return (
            f"interrupted: job {job}: the {sent} of {total} documents already published are "
            f"still indexed by the ingest workers; `ragbus ingest {path}` again publishes the "
            "rest (documents indexed unchanged are skipped)"
        )
    return (
        f"interrupted: job {job}: its {sent} documents were published and are still indexed by "
        f"the ingest workers (GET /v1/ingest/{job} follows it)"
    )
