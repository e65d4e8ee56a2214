"""`ragbus backup DEST` and `ragbus restore SRC`: every part of a backup, in order, with its
manifest.

**Backup**, online, while ragbus serves. Its parts are taken one after another, in an order
chosen so that a restore loses nothing that was finished before the backup began:
1. the JetStream streams, the KV buckets and the object store of the files (each a stream,
   snapshotted by the server with its consumers' state: `jetstream`);
2. the embedded stores, copied by the process that owns them (`stores`). A document indexed
   after the streams' snapshot is in the stores, and its message, not acknowledged in that
   snapshot, comes again after a restore and is found indexed (replaced by id, unchanged);
3. Redis, at one point (`redis_state`): saga states, idempotency keys, sessions, quotas,
   tenants, users, sources. A request still running during the backup may, after a
   restore, wait for its deadline to end;
4. the models derived from shipped data (the intent model) and the trust directory (the
   NATS operator's keys, written 0600, with a warning in the manifest: it is a secret).

**Restore**, onto a fresh machine state: the backup is verified first, whole (`manifest`);
the data directory must be empty unless told to replace; the trust directory and the stores
go into it, then NATS and Redis are found or started there, and the streams and the keys
are restored into them. `ragbus up` then serves what the backup held.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import nats
import nats.errors
from nats.aio.client import Client

from contracts import subjects as sj
from contracts.backup import STORE_PARTS, CopyStores, StoresCopied
from infra.backup import jetstream, redis_state
from infra.backup.manifest import BackupFile, Manifest, Part, describe, verify, write
from infra.backup.stores import copy_idle_stores, external_stores, made_empty
from infra.runtime.data_lock import DataDirLocked, acquire
from infra.runtime.services import Services, ensure_services_sync
from infra.settings import Settings
from infra.sparse_copy import copy_tree

Step = Callable[[str], None]
STORES_TIMEOUT_S = 600.0
INTENT_MODEL = "intent-model"
TRUST_WARNING = (
    "trust/ holds the NATS operator's and accounts' private keys, unencrypted (mode 0600): "
    "keep this backup where those keys may be"
)


class BackupError(RuntimeError):
    """A backup or restore that cannot go on; the message says why and what to do."""


def _quiet(_: str) -> None:
    return None


async def _connect(settings: Settings) -> Client:
    return await nats.connect(
        settings.nats_servers,
        user_credentials=settings.nats_credentials,
        connect_timeout=5,
        max_reconnect_attempts=5,
    )


def _fresh(destination: Path) -> Path:
    """`destination`, made (0700), absolute; refused when it holds anything."""
    destination = destination.resolve()
    if not made_empty(destination):
        raise BackupError(f"{destination} is not empty: back up into a new directory")
    destination.chmod(0o700)
    return destination


async def take_backup(settings: Settings, destination: Path, step: Step = _quiet) -> Manifest:
    """Back up what `settings` point at into `destination` (absent or empty)."""
    # the services as found: the service account's credentials in `tenants` mode, the
    # password of a redis-server that `ragbus up` started (nothing is started here)
    found = await asyncio.to_thread(
        ensure_services_sync, settings.model_copy(update={"start_services": False})
    )
    settings = found.settings
    destination = _fresh(destination)
    manifest = Manifest(ragbus=version("ragbus"), external=external_stores(settings))
    started = time.monotonic()
    nc = await _connect(settings)
    try:
        for name in await jetstream.stream_names(nc):
            step(f"stream {name}")
            snapshot = await jetstream.snapshot_stream(
                nc, name, destination / "jetstream" / f"{name}.tar.s2"
            )
            manifest.streams[name] = {"config": snapshot.config, "state": snapshot.state}
        step("stores")
        await _stores(nc, settings, destination / "stores")
    finally:
        await nc.close()
    step("redis")
    await asyncio.to_thread(
        redis_state.capture, settings.redis_url, destination / "redis" / "dump.rdb"
    )
    models = settings.data_dir / INTENT_MODEL
    if models.is_dir():
        step("models")
        shutil.copytree(models, destination / "models" / INTENT_MODEL)
    if settings.trust_dir.is_dir():
        step("trust")
        shutil.copytree(settings.trust_dir, destination / "trust")
        for path in (destination / "trust").rglob("*"):
            path.chmod(0o700 if path.is_dir() else 0o600)
        manifest.warnings.append(TRUST_WARNING)
    step("checksums")
    manifest.files = await asyncio.to_thread(_described, destination)
    manifest.seconds = round(time.monotonic() - started, 2)
    write(destination, manifest)
    return manifest


PARTS: dict[str, Part] = {
    "jetstream": "jetstream",
    "redis": "redis",
    "models": "models",
    "trust": "trust",
    "vectors": "vectors",
    "graph": "graph",
    "memory": "memory",
}


def _described(root: Path) -> list[BackupFile]:
    """Every file of the backup with its part, size and checksum."""
    files = sorted(path for path in root.rglob("*") if path.is_file())
    return [describe(root, path, _part(root, path)) for path in files]


def _part(root: Path, path: Path) -> Part:
    """The part a file of the backup belongs to: its top directory (a store's, under
    `stores/`)."""
    parts = path.relative_to(root).parts
    return PARTS[parts[1] if parts[0] == "stores" else parts[0]]


async def _stores(nc: Client, settings: Settings, destination: Path) -> StoresCopied:
    """The store owner copies its stores; with none running, they are copied here under the
    data directory's lock (nothing writes them then)."""
    if settings.qdrant_url and settings.neo4j_uri:
        return StoresCopied(external=external_stores(settings))
    request = CopyStores(directory=str(destination))
    try:
        reply = await nc.request(
            sj.BACKUP_STORES, request.model_dump_json().encode(), timeout=STORES_TIMEOUT_S
        )
    except nats.errors.NoRespondersError:
        try:
            lock = acquire(settings.data_dir)
        except DataDirLocked as exc:
            raise BackupError(
                f"{exc}; it runs no ingest worker to copy its stores, so they cannot be copied "
                "at one point while it writes"
            ) from None
        try:
            return await asyncio.to_thread(copy_idle_stores, settings, destination)
        finally:
            lock.release()
    answer = StoresCopied.model_validate_json(reply.data)
    if answer.error:
        raise BackupError(f"the store owner could not copy its stores: {answer.error}")
    missing = [name for name in answer.copied if not (destination / name).is_dir()]
    if missing:
        raise BackupError(
            f"the store owner copied {', '.join(missing)} into {destination} on its own "
            "machine, which this one does not see: run ragbus backup where the data directory is"
        )
    return answer


def _emptiness(data_dir: Path) -> list[str]:
    """What the data directory holds that a restore would replace."""
    if not data_dir.is_dir():
        return []
    ignored = {".lock", "models", "ragbus.log"}  # the lock, shared models, the CLI's own log
    return sorted(p.name for p in data_dir.iterdir() if p.name not in ignored)


async def restore_backup(
    settings: Settings, source: Path, *, replace: bool = False, step: Step = _quiet
) -> Manifest:
    """Restore the backup at `source` into the data directory and the NATS and Redis the
    settings name (started there when none answers)."""
    step("verifying")
    manifest = await asyncio.to_thread(verify, source)
    held = _emptiness(settings.data_dir)
    if held and not replace:
        raise BackupError(
            f"the data directory {settings.data_dir} is not empty ({', '.join(held[:5])}): "
            "restore into an empty one, or say --replace"
        )
    lock = acquire(settings.data_dir)
    services: Services | None = None
    try:
        if (source / "trust").is_dir():
            step("trust")
            _replace_tree(source / "trust", settings.trust_dir)
            for path in settings.trust_dir.rglob("*"):
                path.chmod(0o700 if path.is_dir() else 0o600)
        for name in STORE_PARTS:
            if (source / "stores" / name).is_dir():
                step(f"store {name}")
                _replace_tree(source / "stores" / name, settings.data_dir / name)
        if (source / "models" / INTENT_MODEL).is_dir():
            _replace_tree(source / "models" / INTENT_MODEL, settings.data_dir / INTENT_MODEL)
        step("services")
        services = await asyncio.to_thread(ensure_services_sync, settings)
        running = services.settings
        step("redis")
        await asyncio.to_thread(
            redis_state.restore,
            running.redis_url,
            source / "redis" / "dump.rdb",
            replace=replace,
            wait_replicas=1 if running.redis_url.startswith("redis+sentinel://") else 0,
        )
        nc = await _connect(running)
        try:
            existing = set(await jetstream.stream_names(nc))
            for name, held_stream in sorted(manifest.streams.items()):
                step(f"stream {name}")
                if name in existing:
                    if not replace:
                        raise BackupError(
                            f"the NATS at {running.nats_url} has the stream {name} already: "
                            "restore onto a fresh one, or say --replace"
                        )
                    await nc.jetstream().delete_stream(name)
                await jetstream.restore_stream(
                    nc,
                    held_stream["config"],
                    held_stream["state"],
                    source / "jetstream" / f"{name}.tar.s2",
                )
        finally:
            await nc.close()
    finally:
        if services is not None:
            services.stop()
        lock.release()
    return manifest


def _replace_tree(source: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    copy_tree(source, target)
    with contextlib.suppress(OSError):
        os.chmod(target, 0o700)
