"""`ragbus migrate-vectors`: local-mode Qdrant vectors into the embedded store."""

from __future__ import annotations

from typing import Any

import typer

from cli.common import Verbose, console, errors, interactive_logging
from infra.settings import Settings


def register(app: typer.Typer) -> None:
    app.command("migrate-vectors")(migrate_vectors)


def migrate_vectors(verbose: Verbose = False) -> None:
    """Move vectors kept by qdrant-client's local mode (`<data dir>/qdrant`, before Qdrant
    Edge) into the embedded store: every point kept, each chunk's sentence vectors added, the
    old directory renamed, not deleted."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from infra.retrieval.encoder import load_encoder
    from infra.retrieval.vectors import open_vector_store
    from infra.retrieval.vectors.legacy import legacy_namespaces, migrate

    settings = Settings()
    interactive_logging(settings, verbose)
    if settings.qdrant_url:
        errors.print("RAGBUS_QDRANT_URL is set: the vectors live in that server, nothing to move")
        raise typer.Exit(1)
    found = legacy_namespaces(settings)
    if not found:
        console.print(f"nothing to migrate: no local-mode vectors in {settings.qdrant_path}")
        return
    console.print(f"migrating {', '.join(found)} from {settings.qdrant_path}")
    encoder = load_encoder(settings, bulk=True)
    store = open_vector_store(settings, encoder.dim, migrating=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    try:
        with Progress(*columns, console=console) as progress:
            tasks: dict[str, Any] = {}

            def advance(namespace: str, done: int, total: int) -> None:
                if namespace not in tasks:
                    tasks[namespace] = progress.add_task(namespace, total=total)
                progress.update(tasks[namespace], completed=done)

            report = migrate(settings, store, encoder, progress=advance)
    finally:
        store.close()
    moved = ", ".join(f"{ns}: {n} chunks" for ns, n in report.namespaces.items())
    console.print(
        f"migrated {moved} ({report.sentences} sentence vectors) in {report.seconds:g} s; "
        f"the old directory is kept at {report.kept_at}"
    )
