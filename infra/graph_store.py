"""The entity graph behind the graph_local and graph_global channels.

Model (both backends): (:Entity {norm, name, kind, namespace})-[:MENTIONED_IN]->(:Chunk),
(:Document)-[:HAS_CHUNK]->(:Chunk), entity co-occurrence (:Entity)-[:RELATES_TO {weight =
shared chunks}]->(:Entity), and Louvain communities of that co-occurrence graph, each with an
extractive summary (and a summary embedding when an encoder was given).

The ranking lives here once, over a small read interface (`_GraphView`) that each backend
implements: the embedded store answers from dictionaries, Neo4j with Cypher. So both backends
rank the same graph the same way, and the contract tests hold them to it.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import math
import os
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import networkx as nx
import numpy as np

from contracts.models import RetrievedChunk
from infra.entities import Entity
from infra.logging import get_logger
from infra.settings import Settings
from infra.text import Chunk, split_sentences

log = get_logger(__name__)

Embed = Callable[[list[str]], Awaitable[np.ndarray]]
"""Turns community summaries into vectors (e.g. `Encoder.aencode`)."""

EXACT, TOKEN, PREFIX = 1.0, 0.6, 0.5
"""How much a query norm trusts an entity it meets exactly, as one word of it, or as a prefix."""
MIN_PREFIX = 3
EXPANSION_DISCOUNT = 0.3
EXPAND_FROM = 5
NEIGHBOURS = 8
COMMUNITIES_PER_QUERY = 3
CHUNKS_PER_COMMUNITY = 20
COMMUNITY_ENTITIES_PER_CHUNK = 12
SUMMARY_ENTITIES = 6
GENERIC_SHARE = 0.02
GENERIC_MIN_DF = 20


def entity_key(namespace: str, norm: str) -> str:
    return f"{namespace}|{norm}"


@runtime_checkable
class GraphStore(Protocol):
    async def upsert_document(
        self,
        namespace: str,
        document_id: str,
        title: str,
        chunks: Sequence[Chunk],
        chunk_entities: Sequence[Sequence[Entity]],
    ) -> None:
        """Replace everything the graph knew about this document."""

    async def delete_document(self, namespace: str, document_id: str) -> None: ...

    async def local_search(
        self, namespaces: Sequence[str], query_norms: Sequence[str], top_k: int
    ) -> list[RetrievedChunk]: ...

    async def global_search(
        self,
        namespaces: Sequence[str],
        query_norms: Sequence[str],
        query_vector: Sequence[float] | None,
        top_k: int,
    ) -> list[RetrievedChunk]: ...

    async def recompute_communities(self, embed: Embed | None = None) -> int:
        """Detect communities again; returns how many there are."""

    async def stats(self) -> dict[str, Any]: ...

    async def ping(self) -> bool: ...

    async def aclose(self) -> None: ...


# =========================================================================== shared ranking


@dataclass(frozen=True)
class _Hit:
    """A query norm meeting an entity."""

    query: str
    key: str
    namespace: str
    weight: float
    df: int
    community: str | None = None


@dataclass
class Community:
    key: str
    namespace: str
    members: list[str]
    chunk_ids: list[str]
    summary: str = ""
    vector: list[float] | None = None


def _match_weight(query: str, norm: str) -> float:
    if norm == query:
        return EXACT
    if " " in norm and query in norm.split():
        return TOKEN
    if len(query) >= MIN_PREFIX and norm.startswith(query):
        return PREFIX
    return 0.0


def _idf(total_chunks: int, df: int) -> float:
    """Rarer entities are more specific: log(1 + N/df)."""
    return math.log1p(max(total_chunks, 1) / max(df, 1))


class _GraphView(Protocol):
    async def match(self, namespaces: Sequence[str], norms: Sequence[str]) -> list[_Hit]: ...
    async def chunk_totals(self, namespaces: Sequence[str]) -> dict[str, int]: ...
    async def mentions(self, keys: Sequence[str]) -> dict[str, list[str]]: ...
    async def neighbours(
        self, keys: Sequence[str], limit: int
    ) -> dict[str, list[tuple[str, int, int]]]: ...
    async def fetch_chunks(self, chunk_ids: Sequence[str]) -> dict[str, RetrievedChunk]: ...
    async def communities(self, namespaces: Sequence[str]) -> list[Community]: ...


def _ranked(scores: dict[str, float], hits: Counter[str]) -> list[str]:
    return sorted(scores, key=lambda cid: (-scores[cid], -hits[cid], cid))


async def _hydrate(
    view: _GraphView, order: list[str], scores: dict[str, float], top_k: int
) -> list[RetrievedChunk]:
    chosen = order[:top_k]
    found = await view.fetch_chunks(chosen)
    return [
        found[cid].model_copy(update={"score": round(scores[cid], 6)})
        for cid in chosen
        if cid in found
    ]


async def rank_local(
    view: _GraphView, namespaces: Sequence[str], norms: Sequence[str], top_k: int
) -> list[RetrievedChunk]:
    """Chunks that mention the query's entities.

    Each query norm adds, per chunk, its best matched entity's weight x IDF, so a chunk ranks
    by how many of the query's concepts it holds and how specific they are. Chunks reached
    only through a RELATES_TO neighbour of a matched entity add a discounted score.
    """
    hits = await view.match(namespaces, norms)
    if not hits:
        return []
    totals = await view.chunk_totals(namespaces)
    base = {
        (hit.query, hit.key): hit.weight * _idf(totals.get(hit.namespace, 1), hit.df)
        for hit in hits
    }
    mentions = await view.mentions(sorted({hit.key for hit in hits}))
    best: dict[tuple[str, str], float] = {}
    for (query, key), value in base.items():
        for chunk_id in mentions.get(key, ()):
            slot = (chunk_id, query)
            best[slot] = max(best.get(slot, 0.0), value)
    scores: dict[str, float] = defaultdict(float)
    matched: Counter[str] = Counter()
    for (chunk_id, _query), value in best.items():
        scores[chunk_id] += value
        matched[chunk_id] += 1

    strongest: dict[str, float] = {}
    for (_query, key), value in base.items():
        strongest[key] = max(strongest.get(key, 0.0), value)
    seeds = sorted(strongest, key=lambda k: -strongest[k])[:EXPAND_FROM]
    neighbours = await view.neighbours(seeds, NEIGHBOURS)
    reach: dict[str, float] = {}
    for seed, related in neighbours.items():
        for key, shared, _df in related:
            value = strongest[seed] * shared / (shared + 1)
            reach[key] = max(reach.get(key, 0.0), value)
    if reach:
        expansion: dict[str, float] = {}
        for key, chunk_ids in (await view.mentions(sorted(reach))).items():
            for chunk_id in chunk_ids:
                expansion[chunk_id] = max(expansion.get(chunk_id, 0.0), reach[key])
        # Added, not only given to unscored chunks: a chunk that holds a query concept *and*
        # a bridge entity next to another query concept is the second hop of a multi-hop
        # question ("the association that published X" -> "its first president").
        for chunk_id, value in expansion.items():
            scores[chunk_id] = scores.get(chunk_id, 0.0) + EXPANSION_DISCOUNT * value
    return await _hydrate(view, _ranked(scores, matched), scores, top_k)


def _cosine(a: np.ndarray, b: Sequence[float]) -> float:
    vb = np.asarray(b, dtype=np.float32)
    denom = float(np.linalg.norm(a) * np.linalg.norm(vb))
    return float(a @ vb) / denom if denom else 0.0


async def rank_global(
    view: _GraphView,
    namespaces: Sequence[str],
    norms: Sequence[str],
    query_vector: Sequence[float] | None,
    top_k: int,
) -> list[RetrievedChunk]:
    """Chunks of the communities the query is about.

    A community scores by the query entities it holds (normalised to [0, 1]) plus the cosine
    of its summary embedding with the query, when both exist; its best chunks follow, a
    community's first chunks before another's later ones.
    """
    communities = {c.key: c for c in await view.communities(namespaces)}
    if not communities:
        return []
    overlap: dict[str, float] = defaultdict(float)
    if norms:
        totals = await view.chunk_totals(namespaces)
        per_query: dict[tuple[str, str], float] = {}
        for hit in await view.match(namespaces, norms):
            if hit.community in communities:
                value = hit.weight * _idf(totals.get(hit.namespace, 1), hit.df)
                slot = (hit.query, hit.community)
                per_query[slot] = max(per_query.get(slot, 0.0), value)
        for (_query, community_key), value in per_query.items():
            overlap[community_key] += value
    top_overlap = max(overlap.values(), default=0.0)
    score = {key: value / top_overlap for key, value in overlap.items()} if top_overlap else {}
    if query_vector is not None:
        qv = np.asarray(query_vector, dtype=np.float32)
        for key, community in communities.items():
            if community.vector is not None and len(community.vector) == len(qv):
                similarity = _cosine(qv, community.vector)
                if similarity > 0:
                    score[key] = score.get(key, 0.0) + similarity
    chosen = sorted(score, key=lambda k: (-score[k], k))[:COMMUNITIES_PER_QUERY]
    scores: dict[str, float] = {}
    for key in chosen:
        for position, chunk_id in enumerate(communities[key].chunk_ids):
            value = score[key] / (1.0 + 0.1 * position)
            scores[chunk_id] = max(scores.get(chunk_id, 0.0), value)
    return await _hydrate(view, _ranked(scores, Counter()), scores, top_k)


def detect_communities(namespace: str, chunk_entities: dict[str, list[str]]) -> list[Community]:
    """Louvain (seed 42) over entity co-occurrence; each community's chunks ranked by how much
    of the community they mention, weighted by each entity's strength inside it.

    Edges weigh shared chunks / sqrt(df_a * df_b) (the Ochiai association), not raw counts,
    and entities in more than `GENERIC_SHARE` of the chunks stay out: otherwise "patient" or
    "risk" glue every topic into a few giant communities. Entities met once cannot link two
    chunks and stay out too once there are enough others, and each chunk adds pairs among its
    first `COMMUNITY_ENTITIES_PER_CHUNK` entities (the most trusted): both keep the graph small.
    """
    df = Counter(key for keys in chunk_entities.values() for key in set(keys))
    generic = max(GENERIC_MIN_DF, GENERIC_SHARE * len(chunk_entities))
    specific = {key for key, n in df.items() if n <= generic}
    shared = {key for key in specific if df[key] >= 2}
    eligible = shared if len(shared) >= 10 else specific
    together: Counter[tuple[str, str]] = Counter()
    for keys in chunk_entities.values():
        members = [k for k in dict.fromkeys(keys) if k in eligible][:COMMUNITY_ENTITIES_PER_CHUNK]
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                together[(a, b) if a < b else (b, a)] += 1
    graph = nx.Graph()
    for (a, b), n in together.items():
        graph.add_edge(a, b, weight=n / math.sqrt(df[a] * df[b]))
    if graph.number_of_edges() == 0:
        return []
    groups = nx.community.louvain_communities(graph, weight="weight", seed=42)
    groups = sorted((sorted(g) for g in groups if len(g) >= 2), key=lambda g: (-len(g), g[0]))
    community_of = {key: index for index, group in enumerate(groups) for key in group}
    strength = {
        key: sum(d["weight"] for _, other, d in graph.edges(key, data=True) if other in group_keys)
        for group in groups
        for group_keys in [set(group)]
        for key in group
    }
    chunk_score: list[dict[str, float]] = [{} for _ in groups]
    attach: dict[str, Counter[int]] = defaultdict(Counter)
    for chunk_id, keys in chunk_entities.items():
        distinct = set(keys)
        for key in distinct & community_of.keys():
            scores = chunk_score[community_of[key]]
            scores[chunk_id] = scores.get(chunk_id, 0.0) + strength[key]
        homes = Counter(community_of[k] for k in distinct if k in community_of)
        for key in distinct - community_of.keys():
            attach[key].update(homes)
    # Entities left out of Louvain (generic, or seen once) join the community their chunks
    # side with most, so a query naming them still finds a community; they add no strength.
    member_lists = [list(group) for group in groups]
    for key in sorted(attach):
        if attach[key]:
            member_lists[attach[key].most_common(1)[0][0]].append(key)
    return [
        Community(
            key=f"{namespace}:{index}",
            namespace=namespace,
            members=sorted(member_lists[index], key=lambda k: (-strength.get(k, 0.0), k)),
            chunk_ids=sorted(scores, key=lambda c: (-scores[c], c))[:CHUNKS_PER_COMMUNITY],
        )
        for index, scores in enumerate(chunk_score)
    ]


def summarize(community: Community, names: dict[str, str], texts: dict[str, str]) -> str:
    """Extractive: the community's strongest entity names, then its most central chunk's
    first sentence."""
    top = ", ".join(names.get(k, k.split("|", 1)[-1]) for k in community.members[:SUMMARY_ENTITIES])
    first = community.chunk_ids[0] if community.chunk_ids else None
    sentences = split_sentences(texts.get(first, "")) if first else []
    return f"{top}: {sentences[0]}" if sentences else top


async def _summarise_all(
    communities: list[Community],
    names: dict[str, str],
    texts: dict[str, str],
    embed: Embed | None,
) -> None:
    for community in communities:
        community.summary = summarize(community, names, texts)
    if embed is not None and communities:
        vectors = await embed([c.summary for c in communities])
        for community, vector in zip(communities, vectors, strict=True):
            community.vector = [float(x) for x in vector]


# =========================================================================== embedded backend


@dataclass
class _EntityRecord:
    name: str
    norm: str
    kind: str
    namespace: str
    chunks: set[str] = field(default_factory=set)
    community: str | None = None


_KIND_RANK = {"acronym": 0, "proper": 1, "term": 2}


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
        self._entities: dict[str, _EntityRecord] = {}
        self._tokens: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._sorted: dict[str, list[str]] = {}
        self._totals: Counter[str] = Counter()
        self._communities: dict[str, Community] = {}
        self._dirty = False
        self._embed: Embed | None = None
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

    def _apply_upsert(self, record: dict[str, Any]) -> None:
        namespace, document_id = record["namespace"], record["document_id"]
        self._remove(namespace, document_id)
        self._documents[f"{namespace}/{document_id}"] = record
        for chunk, entities in zip(record["chunks"], record["entities"], strict=True):
            chunk_id = chunk["chunk_id"]
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
                    known = self._entities[key] = _EntityRecord(
                        entity["name"], entity["norm"], entity["kind"], namespace
                    )
                    for token in entity["norm"].split() if " " in entity["norm"] else ():
                        self._tokens[(namespace, token)].add(key)
                    self._sorted.pop(namespace, None)
                elif _KIND_RANK.get(entity["kind"], 9) < _KIND_RANK.get(known.kind, 9):
                    known.kind, known.name = entity["kind"], entity["name"]
                known.chunks.add(chunk_id)
                keys.append(key)
            self._chunk_entities[chunk_id] = keys

    def _remove(self, namespace: str, document_id: str) -> None:
        record = self._documents.pop(f"{namespace}/{document_id}", None)
        if record is None:
            return
        for chunk in record["chunks"]:
            chunk_id = chunk["chunk_id"]
            self._chunks.pop(chunk_id, None)
            self._totals[namespace] -= 1
            for key in self._chunk_entities.pop(chunk_id, []):
                entity = self._entities.get(key)
                if entity is None:
                    continue
                entity.chunks.discard(chunk_id)
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

    # ---------------------------------------------------------------- _GraphView

    async def match(self, namespaces: Sequence[str], norms: Sequence[str]) -> list[_Hit]:
        hits: list[_Hit] = []
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
                    weight = _match_weight(query, entity.norm)
                    if weight:
                        hits.append(
                            _Hit(
                                query, key, namespace, weight, len(entity.chunks), entity.community
                            )
                        )
        return hits

    async def chunk_totals(self, namespaces: Sequence[str]) -> dict[str, int]:
        return {ns: self._totals.get(ns, 0) for ns in namespaces}

    async def mentions(self, keys: Sequence[str]) -> dict[str, list[str]]:
        return {k: sorted(self._entities[k].chunks) for k in keys if k in self._entities}

    async def neighbours(
        self, keys: Sequence[str], limit: int
    ) -> dict[str, list[tuple[str, int, int]]]:
        result: dict[str, list[tuple[str, int, int]]] = {}
        for key in keys:
            entity = self._entities.get(key)
            if entity is None:
                continue
            shared: Counter[str] = Counter()
            for chunk_id in entity.chunks:
                shared.update(k for k in set(self._chunk_entities.get(chunk_id, ())) if k != key)
            top = sorted(shared.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
            result[key] = [(k, n, len(self._entities[k].chunks)) for k, n in top]
        return result

    async def fetch_chunks(self, chunk_ids: Sequence[str]) -> dict[str, RetrievedChunk]:
        return {cid: self._chunks[cid] for cid in chunk_ids if cid in self._chunks}

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
            await self.recompute_communities()
        return await rank_global(self, namespaces, query_norms, query_vector, top_k)

    async def recompute_communities(self, embed: Embed | None = None) -> int:
        """Recompute every namespace's communities; the last `embed` given is remembered so a
        lazy recompute at query time still produces summary vectors."""
        if embed is not None:
            self._embed = embed
        async with self._lock:
            per_namespace: dict[str, dict[str, list[str]]] = defaultdict(dict)
            for chunk_id, keys in self._chunk_entities.items():
                per_namespace[self._chunks[chunk_id].namespace][chunk_id] = keys
            found: list[Community] = []
            for namespace, chunk_entities in per_namespace.items():
                found.extend(await asyncio.to_thread(detect_communities, namespace, chunk_entities))
            names = {key: e.name for key, e in self._entities.items()}
            firsts = [c.chunk_ids[0] for c in found if c.chunk_ids]
            texts = {cid: self._chunks[cid].text for cid in firsts}
            await _summarise_all(found, names, texts, self._embed)
            for entity in self._entities.values():
                entity.community = None
            self._communities = {c.key: c for c in found}
            for community in found:
                for key in community.members:
                    self._entities[key].community = community.key
            self._dirty = False
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
        async with self._lock:
            if self._journal_bytes:
                await self._compact(force=True)


# =========================================================================== Neo4j backend

_SCHEMA = (
    "CREATE CONSTRAINT ragbus_chunk_id IF NOT EXISTS FOR (c:Chunk) REQUIRE c.chunk_id IS UNIQUE",
    "CREATE CONSTRAINT ragbus_entity_key IF NOT EXISTS FOR (e:Entity) REQUIRE e.key IS UNIQUE",
    "CREATE CONSTRAINT ragbus_document_key IF NOT EXISTS FOR (d:Document) REQUIRE d.key IS UNIQUE",
    "CREATE CONSTRAINT ragbus_community_key IF NOT EXISTS "
    "FOR (m:Community) REQUIRE m.key IS UNIQUE",
    "CREATE INDEX ragbus_entity_ns_norm IF NOT EXISTS FOR (e:Entity) ON (e.namespace, e.norm)",
    "CREATE INDEX ragbus_chunk_doc IF NOT EXISTS FOR (c:Chunk) ON (c.namespace, c.document_id)",
    "CREATE INDEX ragbus_community_ns IF NOT EXISTS FOR (m:Community) ON (m.namespace)",
)

_DOC_ENTITY_KEYS = """
MATCH (c:Chunk {namespace: $ns, document_id: $doc})<-[:MENTIONED_IN]-(e:Entity)
RETURN collect(DISTINCT e.key) AS keys
"""
_DELETE_CHUNKS = """
OPTIONAL MATCH (c:Chunk {namespace: $ns, document_id: $doc}) DETACH DELETE c
WITH count(*) AS _
OPTIONAL MATCH (d:Document {key: $dkey}) DETACH DELETE d
"""
_REFRESH_RELATES = """
UNWIND $keys AS k
MATCH (a:Entity {key: k})-[r:RELATES_TO]-(b:Entity)
WHERE b.key IN $keys AND a.key < b.key
OPTIONAL MATCH (a)-[:MENTIONED_IN]->(c:Chunk)<-[:MENTIONED_IN]-(b)
WITH r, count(DISTINCT c) AS w
SET r.weight = w
"""
_DROP_EMPTY_RELATES = """
UNWIND $keys AS k
MATCH (:Entity {key: k})-[r:RELATES_TO]->(:Entity)
WHERE r.weight = 0
DELETE r
"""
_DROP_ORPHANS = """
UNWIND $keys AS k
MATCH (e:Entity {key: k})
WHERE NOT (e)-[:MENTIONED_IN]->()
DETACH DELETE e
"""
_WRITE_DOCUMENT = """
MERGE (d:Document {key: $dkey})
SET d.namespace = $ns, d.document_id = $doc, d.title = $title
WITH d
UNWIND $chunks AS ch
MERGE (c:Chunk {chunk_id: ch.chunk_id})
SET c.namespace = $ns, c.document_id = $doc, c.title = $title, c.text = ch.text,
    c.source = ch.source, c.index = ch.index
MERGE (d)-[:HAS_CHUNK]->(c)
"""
_WRITE_MENTIONS = """
UNWIND $mentions AS m
MATCH (c:Chunk {chunk_id: m.chunk_id})
MERGE (e:Entity {key: m.key})
ON CREATE SET e.namespace = $ns, e.norm = m.norm, e.name = m.name, e.kind = m.kind,
              e.tokens = m.tokens
MERGE (e)-[:MENTIONED_IN]->(c)
"""
_WRITE_RELATES = """
UNWIND $keys AS k
MATCH (a:Entity {key: k})-[:MENTIONED_IN]->(:Chunk {namespace: $ns, document_id: $doc})
      <-[:MENTIONED_IN]-(b:Entity)
WHERE a.key < b.key
WITH DISTINCT a, b
MATCH (a)-[:MENTIONED_IN]->(c:Chunk)<-[:MENTIONED_IN]-(b)
WITH a, b, count(DISTINCT c) AS w
MERGE (a)-[r:RELATES_TO]->(b)
SET r.weight = w
"""
_MARK_DIRTY = "MERGE (m:RagbusMeta {key: 'communities'}) SET m.dirty = true"
_MATCH = """
UNWIND $norms AS q
MATCH (e:Entity)
WHERE e.namespace IN $namespaces
  AND (e.norm = q OR q IN coalesce(e.tokens, [])
       OR (size(q) >= $min_prefix AND e.norm STARTS WITH q))
RETURN q, e.key AS key, e.namespace AS namespace, e.norm AS norm, e.community AS community,
       size([(e)-[:MENTIONED_IN]->() | 1]) AS df
"""


class Neo4jGraphStore:
    """The same graph in Neo4j: MERGE-based writes in one transaction per document."""

    def __init__(self, driver: Any, database: str | None = None) -> None:
        self._driver = driver
        self._database = database
        self._embed: Embed | None = None

    async def _run(self, query: str, **params: Any) -> list[dict[str, Any]]:
        result = await self._driver.execute_query(query, params, database_=self._database)
        return [record.data() for record in result.records]

    async def start(self) -> None:
        await self._driver.verify_connectivity()
        for statement in _SCHEMA:
            await self._run(statement)

    # ---------------------------------------------------------------- writes

    @staticmethod
    async def _delete_tx(tx: Any, namespace: str, document_id: str) -> None:
        params = {"ns": namespace, "doc": document_id, "dkey": f"{namespace}/{document_id}"}
        record = await (await tx.run(_DOC_ENTITY_KEYS, params)).single()
        keys = list(record["keys"]) if record else []
        await (await tx.run(_DELETE_CHUNKS, params)).consume()
        if keys:
            await (await tx.run(_REFRESH_RELATES, {"keys": keys})).consume()
            await (await tx.run(_DROP_EMPTY_RELATES, {"keys": keys})).consume()
            await (await tx.run(_DROP_ORPHANS, {"keys": keys})).consume()

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
        params = {
            "ns": namespace,
            "doc": document_id,
            "dkey": f"{namespace}/{document_id}",
            "title": title,
            "chunks": [
                {"chunk_id": c.chunk_id, "text": c.text, "source": c.source, "index": c.index}
                for c in chunks
            ],
        }
        mentions: list[dict[str, Any]] = [
            {
                "chunk_id": chunk.chunk_id,
                "key": entity_key(namespace, e.norm),
                "norm": e.norm,
                "name": e.name,
                "kind": e.kind,
                "tokens": e.norm.split() if " " in e.norm else [],
            }
            for chunk, entities in zip(chunks, chunk_entities, strict=True)
            for e in entities
        ]
        keys = sorted({m["key"] for m in mentions})

        async def work(tx: Any) -> None:
            await self._delete_tx(tx, namespace, document_id)
            await (await tx.run(_WRITE_DOCUMENT, params)).consume()
            await (await tx.run(_WRITE_MENTIONS, {"ns": namespace, "mentions": mentions})).consume()
            relates = {"keys": keys, "ns": namespace, "doc": document_id}
            await (await tx.run(_WRITE_RELATES, relates)).consume()
            await (await tx.run(_MARK_DIRTY)).consume()

        async with self._driver.session(database=self._database) as session:
            await session.execute_write(work)

    async def delete_document(self, namespace: str, document_id: str) -> None:
        async def work(tx: Any) -> None:
            await self._delete_tx(tx, namespace, document_id)
            await (await tx.run(_MARK_DIRTY)).consume()

        async with self._driver.session(database=self._database) as session:
            await session.execute_write(work)

    # ---------------------------------------------------------------- _GraphView

    async def match(self, namespaces: Sequence[str], norms: Sequence[str]) -> list[_Hit]:
        rows = await self._run(
            _MATCH,
            norms=list(dict.fromkeys(norms)),
            namespaces=list(namespaces),
            min_prefix=MIN_PREFIX,
        )
        hits = []
        for row in rows:
            weight = _match_weight(row["q"], row["norm"])
            if weight:
                hits.append(
                    _Hit(
                        row["q"], row["key"], row["namespace"], weight, row["df"], row["community"]
                    )
                )
        return hits

    async def chunk_totals(self, namespaces: Sequence[str]) -> dict[str, int]:
        rows = await self._run(
            "MATCH (c:Chunk) WHERE c.namespace IN $namespaces "
            "RETURN c.namespace AS ns, count(c) AS n",
            namespaces=list(namespaces),
        )
        return {row["ns"]: row["n"] for row in rows}

    async def mentions(self, keys: Sequence[str]) -> dict[str, list[str]]:
        rows = await self._run(
            "UNWIND $keys AS k MATCH (e:Entity {key: k})-[:MENTIONED_IN]->(c:Chunk) "
            "RETURN k, collect(c.chunk_id) AS chunks",
            keys=list(keys),
        )
        return {row["k"]: sorted(row["chunks"]) for row in rows}

    async def neighbours(
        self, keys: Sequence[str], limit: int
    ) -> dict[str, list[tuple[str, int, int]]]:
        rows = await self._run(
            "UNWIND $keys AS k MATCH (e:Entity {key: k})-[r:RELATES_TO]-(n:Entity) "
            "WITH k, n, r.weight AS w ORDER BY w DESC, n.key "
            "WITH k, collect([n.key, w, size([(n)-[:MENTIONED_IN]->() | 1])])[..$limit] AS ns "
            "RETURN k, ns",
            keys=list(keys),
            limit=limit,
        )
        return {row["k"]: [(n[0], int(n[1]), int(n[2])) for n in row["ns"]] for row in rows}

    async def fetch_chunks(self, chunk_ids: Sequence[str]) -> dict[str, RetrievedChunk]:
        rows = await self._run(
            "UNWIND $ids AS id MATCH (c:Chunk {chunk_id: id}) "
            "RETURN c.chunk_id AS chunk_id, c.document_id AS document_id, c.title AS title, "
            "c.source AS source, c.namespace AS namespace, c.text AS text",
            ids=list(chunk_ids),
        )
        return {
            row["chunk_id"]: RetrievedChunk(**{k: v or "" for k, v in row.items()}) for row in rows
        }

    async def communities(self, namespaces: Sequence[str]) -> list[Community]:
        rows = await self._run(
            "MATCH (m:Community) WHERE m.namespace IN $namespaces "
            "RETURN m.key AS key, m.namespace AS namespace, m.members AS members, "
            "m.chunk_ids AS chunk_ids, m.summary AS summary, m.vector AS vector",
            namespaces=list(namespaces),
        )
        return [Community(**row) for row in rows]

    # ---------------------------------------------------------------- GraphStore

    async def local_search(
        self, namespaces: Sequence[str], query_norms: Sequence[str], top_k: int
    ) -> list[RetrievedChunk]:
        return await rank_local(self, namespaces, query_norms, top_k)

    async def _dirty(self) -> bool:
        rows = await self._run("MATCH (m:RagbusMeta {key: 'communities'}) RETURN m.dirty AS dirty")
        return bool(rows and rows[0]["dirty"])

    async def global_search(
        self,
        namespaces: Sequence[str],
        query_norms: Sequence[str],
        query_vector: Sequence[float] | None,
        top_k: int,
    ) -> list[RetrievedChunk]:
        if await self._dirty():
            await self.recompute_communities()
        return await rank_global(self, namespaces, query_norms, query_vector, top_k)

    async def recompute_communities(self, embed: Embed | None = None) -> int:
        if embed is not None:
            self._embed = embed
        rows = await self._run(
            "MATCH (e:Entity)-[:MENTIONED_IN]->(c:Chunk) "
            "RETURN c.namespace AS ns, c.chunk_id AS chunk_id, collect(e.key) AS keys"
        )
        per_namespace: dict[str, dict[str, list[str]]] = defaultdict(dict)
        for row in rows:
            per_namespace[row["ns"]][row["chunk_id"]] = list(row["keys"])
        found: list[Community] = []
        for namespace, chunk_entities in per_namespace.items():
            found.extend(await asyncio.to_thread(detect_communities, namespace, chunk_entities))
        member_keys = sorted({k for c in found for k in c.members[:SUMMARY_ENTITIES]})
        names = {
            row["key"]: row["name"]
            for row in await self._run(
                "UNWIND $keys AS k MATCH (e:Entity {key: k}) RETURN e.key AS key, e.name AS name",
                keys=member_keys,
            )
        }
        firsts = [c.chunk_ids[0] for c in found if c.chunk_ids]
        texts = {cid: chunk.text for cid, chunk in (await self.fetch_chunks(firsts)).items()}
        await _summarise_all(found, names, texts, self._embed)
        payload = [asdict(c) for c in found]
        membership = [{"key": k, "community": c.key} for c in found for k in c.members]

        async def work(tx: Any) -> None:
            await (await tx.run("MATCH (m:Community) DETACH DELETE m")).consume()
            await (await tx.run("MATCH (e:Entity) REMOVE e.community")).consume()
            await (
                await tx.run(
                    "UNWIND $rows AS row CREATE (m:Community) SET m = row", {"rows": payload}
                )
            ).consume()
            await (
                await tx.run(
                    "UNWIND $rows AS row MATCH (e:Entity {key: row.key}) "
                    "SET e.community = row.community",
                    {"rows": membership},
                )
            ).consume()
            await (
                await tx.run("MERGE (m:RagbusMeta {key: 'communities'}) SET m.dirty = false")
            ).consume()

        async with self._driver.session(database=self._database) as session:
            await session.execute_write(work)
        log.info("communities_recomputed", communities=len(found), backend="neo4j")
        return len(found)

    async def stats(self) -> dict[str, Any]:
        counts: dict[str, Any] = {"backend": "neo4j"}
        for label, key in (
            ("Document", "documents"),
            ("Chunk", "chunks"),
            ("Entity", "entities"),
            ("Community", "communities"),
        ):
            rows = await self._run(f"MATCH (n:{label}) RETURN count(n) AS n")
            counts[key] = rows[0]["n"] if rows else 0
        rows = await self._run("MATCH ()-[r:MENTIONED_IN]->() RETURN count(r) AS n")
        counts["mentions"] = rows[0]["n"] if rows else 0
        counts["communities_dirty"] = await self._dirty()
        return counts

    async def ping(self) -> bool:
        try:
            await self._driver.verify_connectivity()
        except Exception as exc:
            log.warning("neo4j_unreachable", error=str(exc))
            return False
        return True

    async def aclose(self) -> None:
        await self._driver.close()


# =========================================================================== factory


async def open_graph_store(settings: Settings) -> GraphStore:
    """Neo4j when `neo4j_uri` is set, else the embedded store under the data directory."""
    if settings.neo4j_uri:
        from neo4j import AsyncGraphDatabase

        driver = AsyncGraphDatabase.driver(
            settings.neo4j_uri, auth=(settings.neo4j_user, settings.neo4j_password)
        )
        neo = Neo4jGraphStore(driver)
        try:
            await neo.start()
        except Exception:
            await driver.close()
            raise
        log.info("graph_neo4j", uri=settings.neo4j_uri)
        return neo
    store = EmbeddedGraphStore(settings.graph_path)
    await asyncio.to_thread(store.load)
    return store
