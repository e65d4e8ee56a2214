"""The embedded graph store's in-memory index: documents, chunks, entities and communities in
dictionaries, the writes that keep them, and the `GraphView` reads that answer from them.

`infra.retrieval.graph.embedded.EmbeddedGraphStore` persists it and recomputes its communities.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contracts.models import RetrievedChunk
from infra.retrieval.chunking import placed
from infra.retrieval.entities import title_norms
from infra.retrieval.graph.model import (
    MENTIONS_CAP,
    MIN_PREFIX,
    WALK_SCAN,
    Community,
    Hit,
    entity_key,
    generic_df,
)
from infra.retrieval.graph.ranking import match_weight, strength
from infra.retrieval.scope import Scope


@dataclass
class EntityRecord:
    name: str
    norm: str
    kind: str
    namespace: str
    chunks: set[str] = field(default_factory=set)
    community: str | None = None


KIND_RANK = {"acronym": 0, "proper": 1, "term": 2}
RELATED_CACHE = 10_000
"""Entities whose neighbours `EmbeddedGraphIndex` keeps (eight each): about 12 MB at most."""
MATCHED_CACHE = 1_000_000
"""Hits `EmbeddedGraphIndex` keeps of the query norms it matched (about a hundred bytes each,
so 100 MB at most), until any write."""
KEPT_PER_NORM = 64
"""A norm's strongest matches kept (`_Matched.strongest`): four times what a local search
reads (`MATCHES_PER_NORM`)."""


@dataclass(frozen=True)
class _Matched:
    """What a norm meets in a namespace, as the searches read it: its strongest entities, and
    each community's strongest one (what a global search weighs a community by)."""

    strongest: list[Hit]
    by_community: list[Hit]

    @property
    def size(self) -> int:
        return len(self.strongest) + len(self.by_community)


class EmbeddedGraphIndex:
    """The graph in dictionaries, with no disk and no locks: the store around it serialises
    the writes and persists them."""

    def __init__(self) -> None:
        self._documents: dict[str, dict[str, Any]] = {}
        self._held: dict[str, set[str]] = defaultdict(set)
        """namespace -> the ids of its documents, for `within`."""
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
        self._related: dict[tuple[str, int], list[tuple[str, int, int]]] = {}
        """(entity key, limit) -> `neighbours`' answer for it, until any write: the walk's
        expansions are most of a local search's time, and queries share their entities."""
        self._matched: dict[tuple[str, str], _Matched] = {}
        """(namespace, query norm) -> what it meets there, until any write: a common word is a
        token of thousands of entities in a big corpus, and the scan that finds them, weighs
        them and orders them was most of a local search's time there, while a local search
        keeps the strongest few (`match`'s `per_norm`) and a global one each community's
        strongest (`match_communities`)."""
        self._matched_hits = 0
        self._titles: dict[tuple[str, str], list[str]] = defaultdict(list)
        """(namespace, title norm) -> document keys, for `documents_about`."""
        self._dirty = False
        """Whether a write came since the communities were detected."""
        self._writes = 0
        """Writes applied so far: a recompute that saw writes land meanwhile stays dirty."""
        self.changes = 0
        """Changes a search can see (writes, and new communities) since the graph was loaded:
        what a search replica's copy is fenced by (`contracts.replicas.StoresVersion`)."""
        self.copied_changes: int | None = None
        """`changes` at the point the last copy of the graph copied."""

    # ---------------------------------------------------------------- writes

    def _apply(self, op: dict[str, Any]) -> None:
        if op["op"] == "upsert":
            self._apply_upsert(op["document"])
        elif op["op"] == "delete":
            self._remove(op["namespace"], op["document_id"])
        self._related.clear()
        self.forget_matches()
        self._dirty = True
        self._writes += 1
        self.changes += 1

    def forget_matches(self) -> None:
        """Drop the matches kept (`_matched`): a write changes what a norm meets and how
        common each entity is, and new communities change each entity's community."""
        self._matched.clear()
        self._matched_hits = 0

    def _apply_upsert(self, record: dict[str, Any]) -> None:
        namespace, document_id = record["namespace"], record["document_id"]
        self._remove(namespace, document_id)
        document_key = f"{namespace}/{document_id}"
        self._documents[document_key] = record
        self._held[namespace].add(document_id)
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
                **placed(chunk),  # a record written before pages existed has no place
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
        self._held[namespace].discard(document_id)
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

    async def match(
        self, namespaces: Sequence[str], norms: Sequence[str], per_norm: int | None = None
    ) -> list[Hit]:
        hits: list[Hit] = []
        for namespace in dict.fromkeys(namespaces):
            for query in dict.fromkeys(norms):
                if per_norm is not None and per_norm <= KEPT_PER_NORM:
                    hits.extend(self._matched_of(namespace, query).strongest[:per_norm])
                else:
                    hits.extend(self._all_matches(namespace, query)[:per_norm])
        return hits

    async def match_communities(self, namespaces: Sequence[str], norms: Sequence[str]) -> list[Hit]:
        hits: list[Hit] = []
        for namespace in dict.fromkeys(namespaces):
            for query in dict.fromkeys(norms):
                hits.extend(self._matched_of(namespace, query).by_community)
        return hits

    def _matched_of(self, namespace: str, query: str) -> _Matched:
        """What the searches read of `query`'s matches in `namespace`, found once until the
        next write."""
        known = self._matched.get((namespace, query))
        if known is not None:
            return known
        found = self._all_matches(namespace, query)
        best: dict[str, Hit] = {}
        for hit in found:  # strongest first: a community's first hit is its strongest
            if hit.community is not None:
                best.setdefault(hit.community, hit)
        matched = _Matched(found[:KEPT_PER_NORM], list(best.values()))
        if self._matched_hits + matched.size > MATCHED_CACHE:
            self.forget_matches()
        self._matched[(namespace, query)] = matched
        self._matched_hits += matched.size
        return matched

    def _all_matches(self, namespace: str, query: str) -> list[Hit]:
        """Every entity `query` meets in `namespace`, strongest first (`strength`, then key)."""
        candidates = set(self._tokens.get((namespace, query), ()))
        if entity_key(namespace, query) in self._entities:
            candidates.add(entity_key(namespace, query))
        if len(query) >= MIN_PREFIX:
            ordered = self._sorted_norms(namespace)
            at = bisect.bisect_left(ordered, query)
            while at < len(ordered) and ordered[at].startswith(query):
                candidates.add(entity_key(namespace, ordered[at]))
                at += 1
        found: list[Hit] = []
        for key in candidates:
            entity = self._entities[key]
            weight = match_weight(query, entity.norm)
            if weight:
                found.append(
                    Hit(query, key, namespace, weight, len(entity.chunks), entity.community)
                )
        total = self._totals.get(namespace, 0)
        found.sort(key=lambda hit: (-strength(hit, total), hit.key))
        return found

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
        """Co-occurring entities, counted over the entity's first `WALK_SCAN` chunks; each
        entity's answer is kept until the next write (`RELATED_CACHE` of them at most)."""
        result: dict[str, list[tuple[str, int, int]]] = {}
        for key in keys:
            if key not in self._entities:
                continue
            known = self._related.get((key, limit))
            if known is not None:
                result[key] = known
                continue
            shared: Counter[str] = Counter()
            for chunk_id in self._mention_list(key)[:WALK_SCAN]:  # counted in C, a set each
                shared.update(set(self._chunk_entities.get(chunk_id, ())))
            shared.pop(key, None)  # every one of its chunks mentions it
            if len(shared) > limit:  # the cut-off count in C, the full order on the few above it
                cutoff = heapq.nlargest(limit, shared.values())[-1]
                shared = Counter({k: n for k, n in shared.items() if n >= cutoff})
            top = sorted(shared.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
            result[key] = [(k, n, len(self._entities[k].chunks)) for k, n in top]
            if len(self._related) >= RELATED_CACHE:
                self._related.clear()
            self._related[(key, limit)] = result[key]
        return result

    async def fetch_chunks(self, chunk_ids: Sequence[str]) -> dict[str, RetrievedChunk]:
        return {cid: self._chunks[cid] for cid in chunk_ids if cid in self._chunks}

    async def within(self, namespaces: Sequence[str], scope: Scope) -> bool:
        allowed = scope.by_namespace
        empty: frozenset[str] = frozenset()
        return all(
            self._held.get(namespace, empty) <= allowed.get(namespace, empty)
            for namespace in dict.fromkeys(namespaces)
        )

    async def chunks_of(self, documents: Iterable[tuple[str, str]]) -> set[str]:
        found: set[str] = set()
        for namespace, document_id in documents:
            record = self._documents.get(f"{namespace}/{document_id}")
            if record is not None:
                found.update(chunk["chunk_id"] for chunk in record["chunks"])
        return found

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

    async def particular_titles(self, namespaces: Sequence[str], norms: Sequence[str]) -> list[str]:
        return [
            norm
            for norm in dict.fromkeys(norms)
            if any(
                self._titles.get((namespace, norm))
                and self._mention_count(namespace, norm) <= generic_df(self._totals[namespace])
                for namespace in dict.fromkeys(namespaces)
            )
        ]

    def _mention_count(self, namespace: str, norm: str) -> int:
        entity = self._entities.get(entity_key(namespace, norm))
        return len(entity.chunks) if entity is not None else 0

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

    def _counts(self) -> dict[str, int]:
        return {
            "documents": len(self._documents),
            "chunks": len(self._chunks),
            "entities": len(self._entities),
            "mentions": sum(len(keys) for keys in self._chunk_entities.values()),
            "communities": len(self._communities),
        }
