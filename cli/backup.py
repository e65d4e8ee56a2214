"""`ragbus backup DEST` and `ragbus restore SRC` (`infra.backup.run`): each part named as it
is taken, then what the backup holds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from cli.common import Verbose, console, errors, interactive_logging
from infra.settings import Settings


def register(app: typer.Typer) -> None:
    app.command()(backup)
    app.command()(restore)


def backup(
    destination: Annotated[Path, typer.Argument(help="A new or empty directory.")],
    verbose: Verbose = False,
) -> None:
    """Back up, while ragbus serves: the JetStream streams (events, ingest, files, KV), the
    embedded stores (copied at one point by the process that owns them), Redis (saga state,
    idempotency keys, sessions, quotas, tenants, users, sources), the intent model and the
    trust directory, with a manifest of checksums."""
    from infra.backup.run import BackupError, take_backup

    settings = Settings()
    interactive_logging(settings, verbose)
    with console.status("backing up") as status:
        try:
            manifest = asyncio.run(
                take_backup(settings, destination, step=lambda s: status.update(f"backing up {s}"))
            )
        except BackupError as exc:
            errors.print(f"ragbus backup: {exc}")
            raise typer.Exit(1) from None
    size = sum(f.bytes for f in manifest.files)
    console.print(
        f"backed up {len(manifest.streams)} streams and {len(manifest.files)} files, "
        f"{size / 1e6:,.1f} MB, in {manifest.seconds:g} s: {destination}/manifest.json"
    )
    for line in manifest.external:
        errors.print(f"not in this backup, back it up with its server's tools: {line}")
    for line in manifest.warnings:
        errors.print(f"warning: {line}")


def restore(
    source: Annotated[Path, typer.Argument(help="A backup's directory.")],
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="Restore over a data directory, a Redis or a NATS that holds something "
            "(what the backup holds replaces it; anything else is left).",
        ),
    ] = False,
    verbose: Verbose = False,
) -> None:
    """Restore a backup into the data directory and the NATS and Redis the settings name
    (started under the data directory when none answers). The backup is checked whole
    first: a damaged or partial one is refused, naming what is wrong. Then `ragbus up`."""
    from infra.backup.manifest import DamagedBackup
    from infra.backup.redis_state import RedisBackupError
    from infra.backup.run import BackupError, restore_backup
    from infra.runtime.data_lock import DataDirLocked

    settings = Settings()
    interactive_logging(settings, verbose)
    with console.status("restoring") as status:
        try:
            manifest = asyncio.run(
                restore_backup(
                    settings,
                    source,
                    replace=replace,
                    step=lambda s: status.update(f"restoring {s}"),
                )
            )
        except (BackupError, DamagedBackup, RedisBackupError, DataDirLocked) as exc:
            errors.print(f"ragbus restore: {exc}")
            raise typer.Exit(1) from None
    console.print(
        f"restored the backup of {manifest.created_at:%Y-%m-%d %H:%M:%S} UTC "
        f"({len(manifest.streams)} streams, {len(manifest.files)} files) into "
        f"{settings.data_dir}; start it with `ragbus up`"
    )
    for line in manifest.external:
        errors.print(f"not in this backup, restore it with its server's tools: {line}")
