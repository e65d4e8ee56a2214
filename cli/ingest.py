"""`ragbus ingest`: publish documents as an ingest job on the bus and follow it."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.common import (
    INTERRUPTED,
    Failure,
    Verbose,
    access_option,
    console,
    errors,
    interactive_logging,
    store_namespace,
)
from infra.settings import Settings

SOME_FAILED = 3
"""The exit status of an ingest that ran, but where some documents failed or some files were
skipped (each named on stdout): 0 is every document indexed, 1 a job that could not be run or
did not finish, 130 Ctrl-C (`cli.common.INTERRUPTED`), 2 a wrong command line."""


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
    access: Annotated[
        str | None,
        typer.Option(
            help='Who of the tenant may read every document: \'{"groups": ["legal"], '
            '"users": ["alice"]}\' (docs/usage.md, Users and document access); unset: all.',
        ),
    ] = None,
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
    file on the bus: the files are uploaded to NATS's object store first.

    Symbolic links in a folder are not followed (a link out of it is never read). Each file
    skipped (empty, unreadable, a link...) is named with its reason before anything is
    published, and each document that failed once the job ends. Exit status: 0 when every
    document was indexed (or unchanged); 3 when some failed or files were skipped; 1 when
    the job could not be run or did not finish; 130 on Ctrl-C."""
    from cli.ingest_job import describe, ingest_and_follow
    from contracts.envelope import new_request_id
    from infra.runtime.ingest_producer import (
        KINDS_READ,
        DocumentTooLarge,
        FileTooLarge,
        FileUnreadable,
        LocalFile,
        NotDocuments,
        load_sources,
    )
    from infra.runtime.ingest_tree import Skipped

    readers = access_option(access)  # told before anything is read or sent
    settings = Settings()
    interactive_logging(settings, verbose)
    skipped: list[Skipped] = []
    try:
        sources = list(load_sources(path, skipped))
    except NotDocuments as exc:
        raise Failure(str(exc)) from exc
    missed = [(s.name, s.reason) for s in skipped if not s.read_elsewhere]
    _list(f"skipped {_count(len(missed), 'file')}:", missed)
    links = [(s.name, s.reason) for s in skipped if s.read_elsewhere]
    _list(f"not followed {_count(len(links), 'link')} (read under their own paths):", links)
    changes: dict[str, Any] = {"namespace": namespace} if namespace else {}
    if readers is not None:
        changes["access"] = readers
    if changes:
        sources = [
            replace(s, **changes) if isinstance(s, LocalFile) else s.model_copy(update=changes)
            for s in sources
        ]
    if not sources:
        told = f"; {_count(len(missed), 'file')} skipped, each named above" if missed else ""
        raise Failure(f"no documents in {path}: ragbus reads {KINDS_READ}{told}")
    root = path.resolve() if path.is_dir() else None
    names = {
        s.id: s.path.relative_to(root).as_posix() if root else path.name
        for s in sources
        if isinstance(s, LocalFile)
    }
    files = [s for s in sources if isinstance(s, LocalFile)]
    documents = [s for s in sources if not isinstance(s, LocalFile)]
    job = job_id or new_request_id()  # known here, so that Ctrl-C can name it
    sent = [0]
    failures: dict[str, str] = {}

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
                failures=failures,
            )
        )
    except (DocumentTooLarge, FileTooLarge, FileUnreadable) as exc:
        raise Failure(f"nothing was published: {exc}") from exc
    except KeyboardInterrupt:
        raise Failure(_interrupted(job, sent[0], len(sources), path), INTERRUPTED) from None
    if final is None or final.get("status") not in ("completed", "failed"):
        errors.print(f"ingest did not complete: {final or 'no progress events'}")
        raise typer.Exit(1)
    console.print(describe(final))
    failed = int(final.get("documents_failed") or 0)
    reasons = [(names.get(i, i), why) for i, why in sorted(failures.items())]
    _list(f"failed {_count(failed, 'document')}:", reasons)
    if failed > len(failures):
        console.print(
            f"  and {failed - len(failures)} more without a reason here: GET /v1/ingest/{job}",
            soft_wrap=True,
            markup=False,
        )
    if failed or missed:
        total = int(final.get("expected") or len(sources))
        raise Failure(_some_failed(job, failed, total, len(missed)), SOME_FAILED)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _list(heading: str, rows: list[tuple[str, str]]) -> None:
    """`heading` (`skipped 2 files:`) then a line for each, `  name: reason`, on stdout,
    unwrapped (one line each, for scripts); nothing without rows."""
    if not rows:
        return
    console.print(heading, soft_wrap=True, markup=False)
    for name, reason in rows:
        console.print(f"  {name}: {reason}", soft_wrap=True, markup=False, highlight=False)


def _some_failed(job: str, failed: int, total: int, missed: int) -> str:
    """The one line on stderr for a job that ran, but not for everything (exit 3)."""
    parts = []
    if failed:
        parts.append(f"{failed} of {_count(total, 'document')} failed")
    if missed:
        parts.append(f"{_count(missed, 'file')} {'was' if missed == 1 else 'were'} skipped")
    rest = "; the rest was indexed" if failed < total else ""
    return f"job {job}: {' and '.join(parts)}, each named above with its reason{rest}"


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
