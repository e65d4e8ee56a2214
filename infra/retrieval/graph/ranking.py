"""Ranking for the graph channels, written once over a small read interface (`GraphView`)
that each backend implements, so both backends rank the same graph the same way."""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from contracts.models import RetrievedChunk
from infra.logging import get_logger
from infra.retrieval.graph.model import (
    COMMUNITIES_PER_QUERY,
    EXACT,
    EXPAND_FROM,
    MATCHES_PER_NORM,
    MIN_PREFIX,
    NEIGHBOURS,
    PPR_DAMPING,
    PPR_ENTITIES,
    PPR_FRONTIER,
    PPR_HOPS,
    PPR_SHARE,
    PREFIX,
    TOKEN,
    WALK_SCAN,
    Community,
    Hit,
    entity_key,
    generic_df,
)
from infra.retrieval.scope import Scope

log = get_logger(__name__)


def match_weight(query: str, norm: str) -> float:
    if norm == query:
        return EXACT
    if " " in norm and query in norm.split():
        return TOKEN
    if len(query) >= MIN_PREFIX and norm.startswith(query):
        return PREFIX
    return 0.0


def idf(total_chunks: int, df: int) -> float:
    """Rarer entities are more specific: log(1 + N/df)."""
    return math.log1p(max(total_chunks, 1) / max(df, 1))


def strength(hit: Hit, total_chunks: int) -> float:
    """How much a matched entity says of a query norm: its match's weight x its IDF in a
    namespace of `total_chunks` chunks (what `strongest_matches` ranks by)."""
    return hit.weight * idf(total_chunks, hit.df)


class GraphView(Protocol):
    async def match(
        self, namespaces: Sequence[str], norms: Sequence[str], per_norm: int | None = None
    ) -> list[Hit]:
        """The entities each query norm meets (`match_weight`). With `per_norm`, a backend
        may keep only each norm's `per_norm` strongest in a namespace (`strength`, then key):
        all `rank_local` reads of them (`strongest_matches`), which cuts whatever it gets."""
        ...

    async def match_communities(self, namespaces: Sequence[str], norms: Sequence[str]) -> list[Hit]:
        """Of what each norm meets, at least each community's strongest entity (`strength`):
        all `rank_global` weighs a community by. A backend may return every hit."""
        ...

    async def chunk_totals(self, namespaces: Sequence[str]) -> dict[str, int]: ...
    async def mentions(self, keys: Sequence[str]) -> dict[str, list[str]]:
        """Each entity's chunks in id order, `MENTIONS_CAP` at most."""

    async def neighbours(
        self, keys: Sequence[str], limit: int
    ) -> dict[str, list[tuple[str, int, int]]]: ...
    async def fetch_chunks(self, chunk_ids: Sequence[str]) -> dict[str, RetrievedChunk]: ...
    async def communities(self, namespaces: Sequence[str]) -> list[Community]: ...
    async def chunks_of(self, documents: Iterable[tuple[str, str]]) -> set[str]:
        """The chunk ids of the `(namespace, document id)` documents the graph knows."""
        ...

    async def within(self, namespaces: Sequence[str], scope: Scope) -> bool:
        """Whether every document the graph keeps in `namespaces` is one of the scope's (a
        scope that leaves none of them out); False where it cannot tell cheaply."""
        ...

    async def chunk_entities(
        self, chunk_ids: Sequence[str]
    ) -> dict[str, list[tuple[str, str]]]: ...


SCOPED_NEIGHBOURS = 4
"""A scoped walk asks the graph for this many times the neighbours it keeps: those that
co-occur only outside the scope drop out."""


class ScopedView:
    """A `GraphView` that sees only the chunks of a `Scope`'s documents: an entity scores
    through the chunks of those documents alone (one mentioned nowhere else scores nothing),
    the walk follows only co-occurrences inside them and its mass reaches only them, and a
    community offers only them. An entity's IDF stays the namespace's: a statistic that
    ranks, never a passage that is shown."""

    def __init__(self, view: GraphView, scope: Scope, namespaces: Sequence[str]) -> None:
        self._view = view
        self._scope = scope
        self._namespaces = namespaces
        self._allowed: set[str] | None = None
        self._whole: bool | None = None

    async def _leaves_none_out(self) -> bool:
        """Whether the scope holds every document the graph keeps in the request's namespaces
        (a user who may read them all, a filter every document passes): the view is then the
        graph's own, and only `fetch_chunks` still checks each chunk's document, against one
        written since. Asked once a view."""
        if self._whole is None:
            self._whole = await self._view.within(self._namespaces, self._scope)
        return self._whole

    async def _chunks(self) -> set[str]:
        """The chunks of the scope's documents, read once a view."""
        if self._allowed is None:
            self._allowed = await self._view.chunks_of(self._scope.documents)
        return self._allowed

    async def match(
        self, namespaces: Sequence[str], norms: Sequence[str], per_norm: int | None = None
    ) -> list[Hit]:
        return await self._view.match(namespaces, norms, per_norm)

    async def match_communities(self, namespaces: Sequence[str], norms: Sequence[str]) -> list[Hit]:
        return await self._view.match_communities(namespaces, norms)

    async def chunk_totals(self, namespaces: Sequence[str]) -> dict[str, int]:
        return await self._view.chunk_totals(namespaces)

    async def mentions(self, keys: Sequence[str]) -> dict[str, list[str]]:
        found = await self._view.mentions(keys)
        if await self._leaves_none_out():
            return found
        allowed = await self._chunks()
        return {key: [cid for cid in ids if cid in allowed] for key, ids in found.items()}

    async def neighbours(
        self, keys: Sequence[str], limit: int
    ) -> dict[str, list[tuple[str, int, int]]]:
        """The graph's neighbours of each key, counted again over the key's chunks inside the
        scope (its first `WALK_SCAN`): a relation seen only in other documents is not one."""
        if await self._leaves_none_out():
            return await self._view.neighbours(keys, limit)
        related = await self._view.neighbours(keys, limit * SCOPED_NEIGHBOURS)
        mentioned = await self.mentions(keys)
        sample = {key: ids[:WALK_SCAN] for key, ids in mentioned.items()}
        wanted = list(dict.fromkeys(cid for ids in sample.values() for cid in ids))
        entities = await self._view.chunk_entities(wanted) if wanted else {}
        result: dict[str, list[tuple[str, int, int]]] = {}
        for key, found in related.items():
            namespace = key.split("|", 1)[0]  # an entity's chunks are in its namespace
            shared: Counter[str] = Counter()
            for cid in sample.get(key, ()):
                shared.update({entity_key(namespace, norm) for norm, _ in entities.get(cid, ())})
            kept = [(k, shared[k], df) for k, _, df in found if shared[k]]
            result[key] = sorted(kept, key=lambda n: (-n[1], n[0]))[:limit]
        return result

    async def chunk_entities(self, chunk_ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        return await self._view.chunk_entities(chunk_ids)

    async def fetch_chunks(self, chunk_ids: Sequence[str]) -> dict[str, RetrievedChunk]:
        found = await self._view.fetch_chunks(chunk_ids)
        return {
            cid: chunk
            for cid, chunk in found.items()
            if self._scope.allows(chunk.namespace, chunk.document_id)
        }

    async def communities(self, namespaces: Sequence[str]) -> list[Community]:
        if await self._leaves_none_out():
            return await self._view.communities(namespaces)
        allowed = await self._chunks()
        kept = [
            replace(c, chunk_ids=[cid for cid in c.chunk_ids if cid in allowed])
            for c in await self._view.communities(namespaces)
        ]
        return [c for c in kept if c.chunk_ids]

    async def chunks_of(self, documents: Iterable[tuple[str, str]]) -> set[str]:
        return await self._view.chunks_of(documents)

    async def within(self, namespaces: Sequence[str], scope: Scope) -> bool:
        return await self._view.within(namespaces, scope)


def scoped(view: GraphView, scope: Scope | None, namespaces: Sequence[str]) -> GraphView:
    """`view` itself without a scope, else a `ScopedView` of it over `namespaces`."""
    return view if scope is None else ScopedView(view, scope, namespaces)


def ranked(scores: dict[str, float], hits: Counter[str], top_k: int) -> list[str]:
    """The `top_k` best chunks, best first. Thousands of chunks may have a score: the cut-off
    score is found in C (`heapq.nlargest` over the values) and only the chunks at or above it
    are sorted with the full key (score, then matched concepts, then id)."""
    if len(scores) > top_k > 0:
        cutoff = heapq.nlargest(top_k, scores.values())[-1]
        candidates = [cid for cid, score in scores.items() if score >= cutoff]
    else:
        candidates = list(scores)
    return sorted(candidates, key=lambda cid: (-scores[cid], -hits[cid], cid))[:top_k]


async def hydrate(
    view: GraphView, order: list[str], scores: dict[str, float], top_k: int
) -> list[RetrievedChunk]:
    chosen = order[:top_k]
    found = await view.fetch_chunks(chosen)
    return [
        found[cid].model_copy(update={"score": round(scores[cid], 6)})
        for cid in chosen
        if cid in found
    ]


def strongest_matches(base: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """Each query norm's `MATCHES_PER_NORM` best matched entities (weight x IDF, then key).
    A word like "cancer" is a token of thousands of entities in a big corpus; the weakest of
    them add little to a chunk's score and would cost a scan of their chunks each."""
    by_norm: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for slot in base:
        by_norm[slot[0]].append(slot)
    kept: dict[tuple[str, str], float] = {}
    for slots in by_norm.values():
        for slot in sorted(slots, key=lambda s: (-base[s], s[1]))[:MATCHES_PER_NORM]:
            kept[slot] = base[slot]
    return kept


async def rank_local(
    view: GraphView,
    namespaces: Sequence[str],
    norms: Sequence[str],
    top_k: int,
    scope: Scope | None = None,
) -> list[RetrievedChunk]:
    """Chunks that mention the query's entities.

    Each query norm adds, per chunk, its best matched entity's weight x IDF, so a chunk ranks
    by how many of the query's concepts it holds and how specific they are. Chunks reached
    only through a RELATES_TO neighbour of a matched entity add a discounted score.
    With a `scope`, only the chunks of its documents (`ScopedView`).
    """
    view = scoped(view, scope, namespaces)
    hits = await view.match(namespaces, norms, MATCHES_PER_NORM)
    if not hits:
        return []
    totals = await view.chunk_totals(namespaces)
    base = strongest_matches(
        {(hit.query, hit.key): strength(hit, totals.get(hit.namespace, 1)) for hit in hits}
    )
    hits = [hit for hit in hits if (hit.query, hit.key) in base]
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
    total = max(totals.values(), default=1)
    seed_df = {hit.key: hit.df for hit in hits}
    spread = await personalized_pagerank(view, strongest, seed_df, total)
    if spread:
        # Added to the direct scores, not only given to unscored chunks: a chunk that holds a
        # query concept *and* a bridge entity next to another query concept is the second hop
        # of a multi-hop question ("the association that published X" -> "its president").
        top_direct = max(scores.values(), default=1.0) or 1.0
        top_spread = max(spread.values())
        for chunk_id, value in spread.items():
            share = PPR_SHARE * top_direct * value / top_spread
            scores[chunk_id] = scores.get(chunk_id, 0.0) + share
    return await hydrate(view, ranked(scores, matched, top_k), scores, top_k)


async def personalized_pagerank(
    view: GraphView, seeds: dict[str, float], seed_df: dict[str, int], total_chunks: int
) -> dict[str, float]:
    """Chunk scores from a random walk that restarts at the query's entities (HippoRAG's idea).

    The walk runs over the two-hop co-occurrence neighbourhood of the strongest seeds; an edge
    weighs how many chunks two entities share, discounted by how common the neighbour is, so
    the walk prefers specific bridges over ubiquitous terms. Each chunk then gathers the
    walk's mass of the entities it mentions, weighted by their specificity.

    The walk never expands from a generic entity (`generic_df`): its neighbourhood is most of
    the graph, which costs time and says nothing.
    """
    generic = generic_df(total_chunks)
    df: dict[str, int] = dict(seed_df)

    def expandable(keys: Iterable[str]) -> list[str]:
        return [key for key in keys if df.get(key, 0) <= generic]

    frontier = expandable(sorted(seeds, key=lambda k: -seeds[k]))[:EXPAND_FROM]
    if not frontier:
        return {}
    nodes: dict[str, None] = dict.fromkeys(seeds)
    edges: dict[tuple[str, str], float] = {}
    for _hop in range(PPR_HOPS):
        discovered: dict[str, float] = {}
        for source, related in (await view.neighbours(frontier, NEIGHBOURS)).items():
            for key, shared, key_df in related:
                df[key] = key_df
                weight = shared / math.sqrt(max(key_df, 1))
                nodes.setdefault(source)
                nodes.setdefault(key)
                edges[(source, key) if source < key else (key, source)] = weight
                discovered[key] = discovered.get(key, 0.0) + weight
        ranked_new = sorted(discovered, key=lambda k: -discovered[k])
        frontier = expandable(k for k in ranked_new if k not in seeds)[:PPR_FRONTIER]
        if not frontier:
            break
    if not edges:
        return {}
    rank = pagerank(list(nodes), edges, seeds, PPR_DAMPING)
    walked = sorted((k for k in rank if k not in seeds), key=lambda k: -rank[k])[:PPR_ENTITIES]
    spread: dict[str, float] = defaultdict(float)
    for key, chunk_ids in (await view.mentions(walked)).items():
        value = rank[key] * idf(total_chunks, df.get(key, 1))
        for chunk_id in chunk_ids[:WALK_SCAN]:  # a walked entity's mass, over a fixed sample
            spread[chunk_id] += value
    return dict(spread)


def pagerank(
    nodes: list[str],
    edges: dict[tuple[str, str], float],
    restart: dict[str, float],
    damping: float,
    *,
    max_iter: int = 100,
    tol: float = 1.0e-6,
) -> dict[str, float]:
    """Personalised PageRank of a small undirected weighted graph, as `networkx.pagerank`
    computes it (dangling mass follows the restart vector), by power iteration over a dense
    matrix: the walk's graph has a few hundred nodes, where networkx's conversions cost more
    than the iteration."""
    index = {key: i for i, key in enumerate(nodes)}
    size = len(nodes)
    weights = np.zeros((size, size))
    for (a, b), weight in edges.items():
        weights[index[a], index[b]] = weights[index[b], index[a]] = weight
    out = weights.sum(axis=1)
    dangling = out == 0
    transition = np.divide(
        weights, out[:, None], out=np.zeros_like(weights), where=~dangling[:, None]
    )
    p = np.array([restart.get(key, 0.0) for key in nodes])
    p = p / p.sum()
    x = np.full(size, 1.0 / size)
    for _ in range(max_iter):
        previous = x
        x = damping * (previous @ transition + previous[dangling].sum() * p) + (1 - damping) * p
        if np.abs(x - previous).sum() < size * tol:
            break
    return {key: float(x[i]) for key, i in index.items()}


def cosine(a: np.ndarray, b: Sequence[float]) -> float:
    vb = np.asarray(b, dtype=np.float32)
    denom = float(np.linalg.norm(a) * np.linalg.norm(vb))
    return float(a @ vb) / denom if denom else 0.0


async def rank_global(
    view: GraphView,
    namespaces: Sequence[str],
    norms: Sequence[str],
    query_vector: Sequence[float] | None,
    top_k: int,
    scope: Scope | None = None,
) -> list[RetrievedChunk]:
    """Chunks of the communities the query is about (with a `scope`, only the chunks of its
    documents, and only the communities that hold one: `ScopedView`).

    A community scores by the query entities it holds (normalised to [0, 1]) plus the cosine
    of its summary embedding with the query, when both exist; its best chunks follow, a
    community's first chunks before another's later ones.
    """
    view = scoped(view, scope, namespaces)
    communities = {c.key: c for c in await view.communities(namespaces)}
    if not communities:
        return []
    overlap: dict[str, float] = defaultdict(float)
    if norms:
        totals = await view.chunk_totals(namespaces)
        per_query: dict[tuple[str, str], float] = {}
        for hit in await view.match_communities(namespaces, norms):
            if hit.community in communities:
                value = strength(hit, totals.get(hit.namespace, 1))
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
                similarity = cosine(qv, community.vector)
                if similarity > 0:
                    score[key] = score.get(key, 0.0) + similarity
    chosen = sorted(score, key=lambda k: (-score[k], k))[:COMMUNITIES_PER_QUERY]
    scores: dict[str, float] = {}
    for key in chosen:
        # a chunk's value falls with its place, so one past a community's first `top_k` is
        # beaten by those `top_k` and can never be chosen: they are all a community offers
        # (at 300k chunks a community holds thousands)
        for position, chunk_id in enumerate(communities[key].chunk_ids[:top_k]):
            value = score[key] / (1.0 + 0.1 * position)
            scores[chunk_id] = max(scores.get(chunk_id, 0.0), value)
    return await hydrate(view, ranked(scores, Counter(), top_k), scores, top_k)
