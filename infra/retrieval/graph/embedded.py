"""The embedded graph store: in-process dictionaries, a journal and snapshots on disk."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import heapq
import json
import os
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contracts.models import RetrievedChunk
from infra.logging import get_logger
from infra.retrieval.entities import Entity, title_norms
from infra.retrieval.graph.communities import brief_chunk_ids, detect_communities, summarise_all
from infra.retrieval.graph.model import (
    MENTIONS_CAP,
    MIN_PREFIX,
    WALK_SCAN,
    Community,
    Embed,
    Hit,
    Summarise,
    entity_key,
)
from infra.retrieval.graph.ranking import match_weight, rank_global, rank_local
from infra.retrieval.text import Chunk

log = get_logger(__name__)

RunCpu = Callable[..., Awaitable[Any]]
"""`await run_cpu(function, *args)`: a picklable module-level function run somewhere else."""


async def run_in_thread(function: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(function, *args)


@dataclass
class EntityRecord:
    name: str
    norm: str
    kind: str
    namespace: str
    chunks: set[str] = field(default_factory=set)
    community: str | None = None


KIND_RANK = {"acronym": 0, "proper": 1, "term": 2}


class EmbeddedGraphStore:
    """In-process graph persisted under `graph_path`: a snapshot (`graph.json`, replaced
    atomically) plus an append-only journal of document writes since the snapshot.

    Every write is on disk before it returns, at the cost of one journal line; the snapshot is
    rewritten only when the journal outgrows it, so ingestion stays linear in corpus size.
    """

    SNAPSHOT = "graph.json"
    JOURNAL = "graph.journal.jsonl"

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._lock = asyncio.Lock()
        self._documents: dict[str, dict[str, Any]] = {}
        self._chunks: dict[str, RetrievedChunk] = {}
        self._chunk_entities: dict[str, list[str]] = {}
        self._chunk_at: dict[str, tuple[str, int]] = {}
        """chunk id -> (document key, position among its chunks), for `chunk_entities`."""
        self._entities: dict[str, EntityRecord] = {}
        self._tokens: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._sorted: dict[str, list[str]] = {}
        self._totals: Counter[str] = Counter()
        self._communities: dict[str, Community] = {}
        self._mentioned: dict[str, list[str]] = {}
        """entity key -> its chunks as `mentions` returns them, until a write touches it."""
        self._titles: dict[tuple[str, str], list[str]] = defaultdict(list)
        """(namespace, title norm) -> document keys, for `documents_about`."""
        self._dirty = False
        self._embed: Embed | None = None
        self._summarise: Summarise | None = None
        self._recompute_lock = asyncio.Lock()
        self._refresh: asyncio.Task[None] | None = None
        self.run_cpu: RunCpu = run_in_thread
        """Where corpus-wide CPU work (community detection) runs: a thread of this process
        unless the owner hands a better place (`infra.runtime.background`)."""
        self._writes = 0
        self._journal_bytes = 0
        self._snapshot_bytes = 0

    # ---------------------------------------------------------------- persistence

    @property
    def snapshot_path(self) -> Path:
        return self._dir / self.SNAPSHOT

    @property
    def journal_path(self) -> Path:
        return self._dir / self.JOURNAL

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
        if self.journal_path.exists():
            replayed = 0
            for line in self.journal_path.read_text().splitlines():
                try:
                    op = json.loads(line)
                except ValueError:
                    log.warning("graph_journal_torn_line", path=str(self.journal_path))
                    break  # a write cut short by a crash: everything before it stands
                self._apply(op)
                replayed += 1
            self._dirty = self._dirty or replayed > 0
            self._journal_bytes = self.journal_path.stat().st_size
        log.info("graph_loaded", path=str(self._dir), **self._counts())

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

    def _write_snapshot(self, data: dict[str, Any]) -> None:
        tmp = self.snapshot_path.with_suffix(".json.tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            json.dump(data, fh, separators=(",", ":"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.snapshot_path)
        self.journal_path.unlink(missing_ok=True)
        self._snapshot_bytes = self.snapshot_path.stat().st_size
        self._journal_bytes = 0

    async def _compact(self, force: bool = False) -> None:
        """Fold the journal into a new snapshot (caller holds the lock)."""
        if force or self._journal_bytes > max(4 << 20, self._snapshot_bytes):
            await asyncio.to_thread(self._write_snapshot, self._snapshot())

    async def _write(self, op: dict[str, Any]) -> None:
        async with self._lock:
            self._apply(op)
            await asyncio.to_thread(self._append, op)
            await self._compact()

    # ---------------------------------------------------------------- in-memory index

    def _apply(self, op: dict[str, Any]) -> None:
        if op["op"] == "upsert":
            self._apply_upsert(op["document"])
        elif op["op"] == "delete":
            self._remove(op["namespace"], op["document_id"])
        self._dirty = True
        self._writes += 1

    def _apply_upsert(self, record: dict[str, Any]) -> None:
        namespace, document_id = record["namespace"], record["document_id"]
        self._remove(namespace, document_id)
        document_key = f"{namespace}/{document_id}"
        self._documents[document_key] = record
        for norm in title_norms(record["title"]):
            self._titles[(namespace, norm)].append(document_key)
        for position, (chunk, entities) in enumerate(
            zip(record["chunks"], record["entities"], strict=True)
        ):
            chunk_id = chunk["chunk_id"]
            self._chunk_at[chunk_id] = (document_key, position)
            self._chunks[chunk_id] = RetrievedChunk(
                chunk_id=chunk_id,
                document_id=document_id,
                title=record["title"],
                source=chunk.get("source", ""),
                namespace=namespace,
                text=chunk["text"],
            )
            self._totals[namespace] += 1
            keys: list[str] = []
            for entity in entities:
                key = entity_key(namespace, entity["norm"])
                known = self._entities.get(key)
                if known is None:
                    known = self._entities[key] = EntityRecord(
                        entity["name"], entity["norm"], entity["kind"], namespace
                    )
                    for token in entity["norm"].split() if " " in entity["norm"] else ():
                        self._tokens[(namespace, token)].add(key)
                    self._sorted.pop(namespace, None)
                elif KIND_RANK.get(entity["kind"], 9) < KIND_RANK.get(known.kind, 9):
                    known.kind, known.name = entity["kind"], entity["name"]
                known.chunks.add(chunk_id)
                self._mentioned.pop(key, None)
                keys.append(key)
            self._chunk_entities[chunk_id] = keys

    def _remove(self, namespace: str, document_id: str) -> None:
        document_key = f"{namespace}/{document_id}"
        record = self._documents.pop(document_key, None)
        if record is None:
            return
        for norm in title_norms(record["title"]):
            titled = self._titles.get((namespace, norm), [])
            if document_key in titled:
                titled.remove(document_key)
            if not titled:
                self._titles.pop((namespace, norm), None)
        for chunk in record["chunks"]:
            chunk_id = chunk["chunk_id"]
            self._chunks.pop(chunk_id, None)
            self._chunk_at.pop(chunk_id, None)
            self._totals[namespace] -= 1
            for key in self._chunk_entities.pop(chunk_id, []):
                entity = self._entities.get(key)
                if entity is None:
                    continue
                entity.chunks.discard(chunk_id)
                self._mentioned.pop(key, None)
                if not entity.chunks:
                    del self._entities[key]
                    for token in entity.norm.split() if " " in entity.norm else ():
                        self._tokens[(namespace, token)].discard(key)
                    self._sorted.pop(namespace, None)

    def _sorted_norms(self, namespace: str) -> list[str]:
        if namespace not in self._sorted:
            self._sorted[namespace] = sorted(
                e.norm for e in self._entities.values() if e.namespace == namespace
            )
        return self._sorted[namespace]

    # ---------------------------------------------------------------- GraphView

    async def match(self, namespaces: Sequence[str], norms: Sequence[str]) -> list[Hit]:
        hits: list[Hit] = []
        for namespace in dict.fromkeys(namespaces):
            ordered = self._sorted_norms(namespace)
            for query in dict.fromkeys(norms):
                candidates = set(self._tokens.get((namespace, query), ()))
                if entity_key(namespace, query) in self._entities:
                    candidates.add(entity_key(namespace, query))
                if len(query) >= MIN_PREFIX:
                    at = bisect.bisect_left(ordered, query)
                    while at < len(ordered) and ordered[at].startswith(query):
                        candidates.add(entity_key(namespace, ordered[at]))
                        at += 1
                for key in candidates:
                    entity = self._entities[key]
                    weight = match_weight(query, entity.norm)
                    if weight:
                        hits.append(
                            Hit(query, key, namespace, weight, len(entity.chunks), entity.community)
                        )
        return hits

    async def chunk_totals(self, namespaces: Sequence[str]) -> dict[str, int]:
        return {ns: self._totals.get(ns, 0) for ns in namespaces}

    def _mention_list(self, key: str) -> list[str]:
        listed = self._mentioned.get(key)
        if listed is None:
            chunks = self._entities[key].chunks
            listed = self._mentioned[key] = (
                heapq.nsmallest(MENTIONS_CAP, chunks)
                if len(chunks) > MENTIONS_CAP
                else sorted(chunks)
            )
        return listed

    async def mentions(self, keys: Sequence[str]) -> dict[str, list[str]]:
        return {key: self._mention_list(key) for key in keys if key in self._entities}

    async def neighbours(
        self, keys: Sequence[str], limit: int
    ) -> dict[str, list[tuple[str, int, int]]]:
        """Co-occurring entities, counted over the entity's first `WALK_SCAN` chunks."""
        result: dict[str, list[tuple[str, int, int]]] = {}
        for key in keys:
            if key not in self._entities:
                continue
            shared: Counter[str] = Counter()
            for chunk_id in self._mention_list(key)[:WALK_SCAN]:
                shared.update(k for k in set(self._chunk_entities.get(chunk_id, ())) if k != key)
            if len(shared) > limit:  # the cut-off count in C, the full order on the few above it
                cutoff = heapq.nlargest(limit, shared.values())[-1]
                shared = Counter({k: n for k, n in shared.items() if n >= cutoff})
            top = sorted(shared.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
            result[key] = [(k, n, len(self._entities[k].chunks)) for k, n in top]
        return result

    async def fetch_chunks(self, chunk_ids: Sequence[str]) -> dict[str, RetrievedChunk]:
        return {cid: self._chunks[cid] for cid in chunk_ids if cid in self._chunks}

    async def documents_about(
        self, namespaces: Sequence[str], norms: Sequence[str]
    ) -> list[RetrievedChunk]:
        found: list[RetrievedChunk] = []
        seen: set[str] = set()
        for norm in norms:
            for namespace in namespaces:
                for document_key in self._titles.get((namespace, norm), ()):
                    chunks = self._documents[document_key]["chunks"]
                    if document_key not in seen and chunks:
                        seen.add(document_key)
                        found.append(self._chunks[chunks[0]["chunk_id"]])
        return found

    async def chunk_entities(self, chunk_ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        found: dict[str, list[tuple[str, str]]] = {}
        for chunk_id in chunk_ids:
            at = self._chunk_at.get(chunk_id)
            if at is not None:
                entities = self._documents[at[0]]["entities"][at[1]]
                found[chunk_id] = [(e["norm"], e["kind"]) for e in entities]
        return found

    async def communities(self, namespaces: Sequence[str]) -> list[Community]:
        wanted = set(namespaces)
        return [c for c in self._communities.values() if c.namespace in wanted]

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
                {"chunk_id": c.chunk_id, "index": c.index, "text": c.text, "source": c.source}
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
        self, namespaces: Sequence[str], query_norms: Sequence[str], top_k: int
    ) -> list[RetrievedChunk]:
        return await rank_local(self, namespaces, query_norms, top_k)

    async def global_search(
        self,
        namespaces: Sequence[str],
        query_norms: Sequence[str],
        query_vector: Sequence[float] | None,
        top_k: int,
    ) -> list[RetrievedChunk]:
        if self._dirty:
            if not self._communities:  # nothing to answer from yet: the first one is awaited
                async with self._recompute_lock:
                    if self._dirty:  # unless a recompute under way has just settled it
                        await self._recompute()
            elif not self._recompute_lock.locked() and self._refresh is None:
                # answer from the communities there are; the fresh ones land in the background
                self._refresh = asyncio.create_task(self._background_refresh())
        return await rank_global(self, namespaces, query_norms, query_vector, top_k)

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
        await summarise_all(found, names, texts, self._embed, self._summarise)
        async with self._lock:
            for entity in self._entities.values():
                entity.community = None
            self._communities = {c.key: c for c in found}
            for community in found:
                for key in community.members:
                    if key in self._entities:  # unless deleted while summarising
                        self._entities[key].community = community.key
            self._dirty = self._writes != writes
            await self._compact(force=True)
        log.info("communities_recomputed", communities=len(found))
        return len(found)

    def _counts(self) -> dict[str, int]:
        return {
            "documents": len(self._documents),
            "chunks": len(self._chunks),
            "entities": len(self._entities),
            "mentions": sum(len(keys) for keys in self._chunk_entities.values()),
            "communities": len(self._communities),
        }

    async def stats(self) -> dict[str, Any]:
        return {"backend": "embedded", **self._counts(), "communities_dirty": self._dirty}

    async def ping(self) -> bool:
        return self._dir.is_dir()

    async def aclose(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refresh
        async with self._lock:
            if self._journal_bytes:
                await self._compact(force=True)


# =========================================================================== Neo4j backend
