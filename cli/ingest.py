"""`ragbus ingest`: publish documents as an ingest job on the bus and follow it."""

from __future__ import annotations

import asyncio
from dataclasses import replace
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
    path: Annotated[
        Path, typer.Argument(exists=True, help="A file or a directory (tree) of documents.")
    ],
    namespace: Annotated[
        str | None, typer.Option(help="Put every document here.", callback=store_namespace)
    ] = None,
    job_id: Annotated[str | None, typer.Option(help="Job id (default: a new one).")] = None,
    timeout: Annotated[
        float,
        typer.Option(
            help="Seconds without progress before the command stops waiting (the job goes on "
            "in the workers)."
        ),
    ] = 600.0,
    verbose: Verbose = False,
) -> None:
    """Publish documents as an ingest job and follow it until it completes. It reads PDF
    (with a text layer, or scanned), Word (.docx), PowerPoint (.pptx), HTML, PNG/JPEG/TIFF
    scans, Markdown and text files, folder trees of them, and BEIR corpus .jsonl files. An
    ingest worker must be running (`ragbus up`, or `ragbus worker ingest`), and for files
    other than Markdown and text a parse worker (`ragbus worker parse`), which parses each
    file on the bus: the files are uploaded to NATS's object store first."""
    from cli.ingest_job import describe, ingest_and_follow
    from contracts.envelope import new_request_id
    from infra.runtime.ingest_producer import (
        KINDS_READ,
        DocumentTooLarge,
        FileTooLarge,
        LocalFile,
        NotDocuments,
        load_sources,
    )

    settings = Settings()
    interactive_logging(settings, verbose)
    try:
        sources = list(load_sources(path))
    except NotDocuments as exc:
        raise Failure(str(exc)) from exc
    if namespace:
        sources = [
            replace(s, namespace=namespace)
            if isinstance(s, LocalFile)
            else s.model_copy(update={"namespace": namespace})
            for s in sources
        ]
    if not sources:
        raise Failure(f"no documents in {path}: ragbus reads {KINDS_READ} (empty files skipped)")
    files = [s for s in sources if isinstance(s, LocalFile)]
    documents = [s for s in sources if not isinstance(s, LocalFile)]
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
                files=files,
            )
        )
    except (DocumentTooLarge, FileTooLarge) as exc:
        raise Failure(f"nothing was published: {exc}") from exc
    except KeyboardInterrupt:
        raise Failure(_interrupted(job, sent[0], len(sources), path), INTERRUPTED) from None
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
