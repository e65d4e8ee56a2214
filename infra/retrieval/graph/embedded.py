"""The embedded graph store: the in-memory index (`infra.retrieval.graph.embedded_index`)
persisted as a journal and snapshots on disk, with its community recompute."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from contracts.models import RetrievedChunk
from infra.logging import get_logger
from infra.retrieval.chunking import Chunk
from infra.retrieval.entities import Entity
from infra.retrieval.graph.communities import brief_chunk_ids, detect_communities, summarise_all
from infra.retrieval.graph.embedded_index import EmbeddedGraphIndex
from infra.retrieval.graph.model import Community, Embed, Summarise
from infra.retrieval.graph.ranking import rank_global, rank_local
from infra.retrieval.scope import Scope

log = get_logger(__name__)

RunCpu = Callable[..., Awaitable[Any]]
"""`await run_cpu(function, *args)`: a picklable module-level function run somewhere else."""


async def run_in_thread(function: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(function, *args)


class EmbeddedGraphStore(EmbeddedGraphIndex):
    """In-process graph persisted under `graph_path`: a snapshot (`graph.json`, replaced
    atomically) plus an append-only journal of document writes since the snapshot.

    Every write is on disk before it returns, at the cost of one journal line; the snapshot is
    rewritten only when the journal outgrows it, so ingestion stays linear in corpus size.
    """

    SNAPSHOT = "graph.json"
    JOURNAL = "graph.journal.jsonl"
    SEALED = "graph.journal.sealed.jsonl"

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self._dir = directory
        self._lock = asyncio.Lock()
        self._embed: Embed | None = None
        self._summarise: Summarise | None = None
        self._recompute_lock = asyncio.Lock()
        self._refresh: asyncio.Task[None] | None = None
        self.run_cpu: RunCpu = run_in_thread
        """Where corpus-wide CPU work (community detection) runs: a thread of this process
        unless the owner hands a better place (`infra.runtime.background`)."""
        self._journal_bytes = 0
        self._snapshot_bytes = 0
        self._snapshotting: asyncio.Task[None] | None = None

    # ---------------------------------------------------------------- persistence

    @property
    def snapshot_path(self) -> Path:
        return self._dir / self.SNAPSHOT

    @property
    def journal_path(self) -> Path:
        return self._dir / self.JOURNAL

    @property
    def sealed_path(self) -> Path:
        """The journal a snapshot being written folds in: kept until that snapshot is on
        disk, so a crash in between loses nothing (`load` replays it, then the journal)."""
        return self._dir / self.SEALED

    def load(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        if self.snapshot_path.exists():
            data = json.loads(self.snapshot_path.read_text())
            for record in data.get("documents", []):
                self._apply_upsert(record)
            for raw in data.get("communities", []):
                community = Community(**raw)
                self._communities[community.key] = community
                for key in community.members:
                    if key in self._entities:
                        self._entities[key].community = community.key
            self._dirty = bool(data.get("communities_dirty", False))
            self._snapshot_bytes = self.snapshot_path.stat().st_size
        replayed = 0
        for journal in (self.sealed_path, self.journal_path):
            if journal.exists():
                replayed += self._replay(journal)
        self._dirty = self._dirty or replayed > 0
        if self.journal_path.exists():
            self._journal_bytes = self.journal_path.stat().st_size
        log.info("graph_loaded", path=str(self._dir), **self._counts())

    def _replay(self, journal: Path) -> int:
        """Apply a journal's writes in order (replaying one a snapshot already holds gives the
        same state: each write replaces or removes a whole document)."""
        replayed = 0
        for line in journal.read_text().splitlines():
            try:
                op = json.loads(line)
            except ValueError:
                log.warning("graph_journal_torn_line", path=str(journal))
                break  # a write cut short by a crash: everything before it stands
            self._apply(op)
            replayed += 1
        return replayed

    def _append(self, op: dict[str, Any]) -> None:
        line = json.dumps(op, separators=(",", ":")) + "\n"
        with self.journal_path.open("a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self._journal_bytes += len(line.encode())

    def _snapshot(self) -> dict[str, Any]:
        return {
            "version": 1,
            "documents": list(self._documents.values()),
            "communities": [asdict(c) for c in self._communities.values()],
            "communities_dirty": self._dirty,
        }

    def _seal_journal(self) -> None:
        """The journal so far, set aside for the snapshot being made (caller holds the lock):
        writes from now on go to a fresh journal."""
        if self.journal_path.exists():
            if self.sealed_path.exists():  # an earlier snapshot did not finish: keep both
                with self.sealed_path.open("ab") as sealed:
                    sealed.write(self.journal_path.read_bytes())
                    sealed.flush()
                    os.fsync(sealed.fileno())
                self.journal_path.unlink()
            else:
                os.replace(self.journal_path, self.sealed_path)
        self._journal_bytes = 0

    def _write_snapshot(self, data: dict[str, Any]) -> None:
        tmp = self.snapshot_path.with_suffix(".json.tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            json.dump(data, fh, separators=(",", ":"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.snapshot_path)
        self.sealed_path.unlink(missing_ok=True)
        self._snapshot_bytes = self.snapshot_path.stat().st_size

    async def _compact(self, force: bool = False) -> None:
        """Fold the journal into a new snapshot (the caller holds the write lock). The state
        is taken under the lock (a shallow copy: a write replaces a document's record, never
        changes it), the journal sealed, and the snapshot written outside the lock: writes go
        on meanwhile, into a fresh journal. At 20,000 documents the snapshot is about 70 MB
        of JSON and took seconds, while every write waited for it."""
        if not (force or self._journal_bytes > max(4 << 20, self._snapshot_bytes)):
            return
        if self._snapshotting is not None and not self._snapshotting.done():
            return  # one is being written; the next compaction folds in what came since
        data = self._snapshot()
        self._seal_journal()
        self._snapshotting = asyncio.create_task(self._written(data))

    async def _written(self, data: dict[str, Any]) -> None:
        try:
            await asyncio.to_thread(self._write_snapshot, data)
        except Exception:  # the sealed journal and the journal still hold every write
            log.exception("graph_snapshot_failed", path=str(self.snapshot_path))

    async def _write(self, op: dict[str, Any]) -> None:
        async with self._lock:
            self._apply(op)
            await asyncio.to_thread(self._append, op)
            await self._compact()

    # ---------------------------------------------------------------- GraphStore

    async def upsert_document(
        self,
        namespace: str,
        document_id: str,
        title: str,
        chunks: Sequence[Chunk],
        chunk_entities: Sequence[Sequence[Entity]],
    ) -> None:
        if len(chunks) != len(chunk_entities):
            raise ValueError("one entity list per chunk is required")
        record = {
            "namespace": namespace,
            "document_id": document_id,
            "title": title,
            "chunks": [
                {
                    "chunk_id": c.chunk_id,
                    "index": c.index,
                    "text": c.text,
                    "source": c.source,
                    **({"heading": c.heading} if c.heading else {}),
                    **({"page": c.page, "page_label": c.page_label} if c.page is not None else {}),
                }
                for c in chunks
            ],
            "entities": [
                [{"name": e.name, "norm": e.norm, "kind": e.kind} for e in entities]
                for entities in chunk_entities
            ],
        }
        await self._write({"op": "upsert", "document": record})

    async def delete_document(self, namespace: str, document_id: str) -> None:
        if f"{namespace}/{document_id}" in self._documents:
            await self._write({"op": "delete", "namespace": namespace, "document_id": document_id})

    async def local_search(
        self,
        namespaces: Sequence[str],
        query_norms: Sequence[str],
        top_k: int,
        scope: Scope | None = None,
    ) -> list[RetrievedChunk]:
        return await rank_local(self, namespaces, query_norms, top_k, scope)

    async def global_search(
        self,
        namespaces: Sequence[str],
        query_norms: Sequence[str],
        query_vector: Sequence[float] | None,
        top_k: int,
        scope: Scope | None = None,
    ) -> list[RetrievedChunk]:
        if self._dirty:
            if not self._communities:  # nothing to answer from yet: the first one is awaited
                async with self._recompute_lock:
                    if self._dirty:  # unless a recompute under way has just settled it
                        await self._recompute()
            elif not self._recompute_lock.locked() and self._refresh is None:
                # answer from the communities there are; the fresh ones land in the background
                self._refresh = asyncio.create_task(self._background_refresh())
        return await rank_global(self, namespaces, query_norms, query_vector, top_k, scope)

    async def recompute_communities(
        self, embed: Embed | None = None, summarise: Summarise | None = None
    ) -> int:
        """Recompute every namespace's communities; the last `embed` and `summarise` given are
        remembered, so a lazy recompute at query time still produces summary vectors and the
        same kind of summaries.

        Communities are detected under the write lock but summarised and embedded outside it
        (a model may take a while): documents keep being written meanwhile, and when any was,
        the store stays dirty so the next global search recomputes again."""
        if embed is not None:
            self._embed = embed
        if summarise is not None:
            self._summarise = summarise
        async with self._recompute_lock:
            return await self._recompute()

    async def _background_refresh(self) -> None:
        try:
            async with self._recompute_lock:
                if self._dirty:
                    await self._recompute()
        except Exception:  # the next global search tries again
            log.exception("communities_refresh_failed")
        finally:
            self._refresh = None

    async def _recompute(self) -> int:
        """One recompute (the caller holds the recompute lock). The graph is copied under the
        write lock and detected outside it (`run_cpu`: the niced background process in a
        ragbus process), so ingestion keeps writing meanwhile and leaves the store dirty."""
        async with self._lock:
            writes = self._writes
            per_namespace: dict[str, dict[str, list[str]]] = defaultdict(dict)
            for chunk_id, keys in self._chunk_entities.items():
                per_namespace[self._chunks[chunk_id].namespace][chunk_id] = list(keys)
        found: list[Community] = []
        for namespace, chunk_entities in per_namespace.items():
            found.extend(await self.run_cpu(detect_communities, namespace, chunk_entities))
        async with self._lock:
            names = {key: e.name for key, e in self._entities.items()}
            texts = {
                cid: chunk.text
                for cid in brief_chunk_ids(found)
                if (chunk := self._chunks.get(cid)) is not None
            }
            known = {c.summary: c.vector for c in self._communities.values() if c.vector}
        await summarise_all(found, names, texts, self._embed, self._summarise, known)
        async with self._lock:
            for entity in self._entities.values():
                entity.community = None
            self._communities = {c.key: c for c in found}
            for community in found:
                for key in community.members:
                    if key in self._entities:  # unless deleted while summarising
                        self._entities[key].community = community.key
            self.forget_matches()  # they name each entity's community
            self.changes += 1
            self._dirty = self._writes != writes
            await self._compact(force=True)
        log.info("communities_recomputed", communities=len(found))
        return len(found)

    async def stats(self) -> dict[str, Any]:
        return {"backend": "embedded", **self._counts(), "communities_dirty": self._dirty}

    async def ping(self) -> bool:
        return self._dir.is_dir()

    async def copy_to(self, destination: Path) -> bool:
        """The snapshot and the journals copied while no write runs and no snapshot is being
        written: one point of the graph, which `load` reads back whole."""
        async with self._lock:
            if self._snapshotting is not None:
                await self._snapshotting
            await asyncio.to_thread(self._copy_files, destination)
            self.copied_changes = self.changes
        return True

    def _copy_files(self, destination: Path) -> None:
        destination.mkdir(parents=True)
        for path in (self.snapshot_path, self.sealed_path, self.journal_path):
            if path.exists():
                shutil.copy2(path, destination / path.name)

    async def aclose(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refresh
        async with self._lock:
            if self._journal_bytes:
                await self._compact(force=True)
        if self._snapshotting is not None:
            await self._snapshotting
