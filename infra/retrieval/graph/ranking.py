"""Ranking for the graph channels, written once over a small read interface (`GraphView`)
that each backend implements, so both backends rank the same graph the same way."""

from __future__ import annotations

import asyncio
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Protocol

import networkx as nx
import numpy as np

from contracts.models import RetrievedChunk
from infra.logging import get_logger
from infra.retrieval.graph.model import (
    COMMUNITIES_PER_QUERY,
    EXACT,
    EXPAND_FROM,
    GENERIC_MIN_DF,
    GENERIC_SHARE,
    MIN_PREFIX,
    NEIGHBOURS,
    PPR_DAMPING,
    PPR_ENTITIES,
    PPR_FRONTIER,
    PPR_HOPS,
    PPR_SHARE,
    PREFIX,
    TOKEN,
    Community,
    Hit,
)

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


class GraphView(Protocol):
    async def match(self, namespaces: Sequence[str], norms: Sequence[str]) -> list[Hit]: ...
    async def chunk_totals(self, namespaces: Sequence[str]) -> dict[str, int]: ...
    async def mentions(self, keys: Sequence[str]) -> dict[str, list[str]]: ...
    async def neighbours(
        self, keys: Sequence[str], limit: int
    ) -> dict[str, list[tuple[str, int, int]]]: ...
    async def fetch_chunks(self, chunk_ids: Sequence[str]) -> dict[str, RetrievedChunk]: ...
    async def communities(self, namespaces: Sequence[str]) -> list[Community]: ...


def ranked(scores: dict[str, float], hits: Counter[str]) -> list[str]:
    return sorted(scores, key=lambda cid: (-scores[cid], -hits[cid], cid))


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


async def rank_local(
    view: GraphView, namespaces: Sequence[str], norms: Sequence[str], top_k: int
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
        (hit.query, hit.key): hit.weight * idf(totals.get(hit.namespace, 1), hit.df) for hit in hits
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
    return await hydrate(view, ranked(scores, matched), scores, top_k)


async def personalized_pagerank(
    view: GraphView, seeds: dict[str, float], seed_df: dict[str, int], total_chunks: int
) -> dict[str, float]:
    """Chunk scores from a random walk that restarts at the query's entities (HippoRAG's idea).

    The walk runs over the two-hop co-occurrence neighbourhood of the strongest seeds; an edge
    weighs how many chunks two entities share, discounted by how common the neighbour is, so
    the walk prefers specific bridges over ubiquitous terms. Each chunk then gathers the
    walk's mass of the entities it mentions, weighted by their specificity.

    The walk never expands from a generic entity (in more than `GENERIC_SHARE` of the chunks):
    its neighbourhood is most of the graph, which costs time and says nothing.
    """
    generic = max(GENERIC_MIN_DF, GENERIC_SHARE * total_chunks)
    df: dict[str, int] = dict(seed_df)

    def expandable(keys: Iterable[str]) -> list[str]:
        return [key for key in keys if df.get(key, 0) <= generic]

    frontier = expandable(sorted(seeds, key=lambda k: -seeds[k]))[:EXPAND_FROM]
    if not frontier:
        return {}
    graph = nx.Graph()
    graph.add_nodes_from(seeds)
    for _hop in range(PPR_HOPS):
        discovered: dict[str, float] = {}
        for source, related in (await view.neighbours(frontier, NEIGHBOURS)).items():
            for key, shared, key_df in related:
                df[key] = key_df
                weight = shared / math.sqrt(max(key_df, 1))
                graph.add_edge(source, key, weight=weight)
                discovered[key] = discovered.get(key, 0.0) + weight
        ranked_new = sorted(discovered, key=lambda k: -discovered[k])
        frontier = expandable(k for k in ranked_new if k not in seeds)[:PPR_FRONTIER]
        if not frontier:
            break
    if graph.number_of_edges() == 0:
        return {}
    restart = {key: seeds.get(key, 0.0) for key in graph}
    # CPU work off the event loop: the process also serves the bus and the API.
    rank = await asyncio.to_thread(
        nx.pagerank, graph, alpha=PPR_DAMPING, personalization=restart, weight="weight"
    )
    walked = sorted((k for k in rank if k not in seeds), key=lambda k: -rank[k])[:PPR_ENTITIES]
    spread: dict[str, float] = defaultdict(float)
    for key, chunk_ids in (await view.mentions(walked)).items():
        value = rank[key] * idf(total_chunks, df.get(key, 1))
        for chunk_id in chunk_ids:
            spread[chunk_id] += value
    return dict(spread)


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
                value = hit.weight * idf(totals.get(hit.namespace, 1), hit.df)
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
        for position, chunk_id in enumerate(communities[key].chunk_ids):
            value = score[key] / (1.0 + 0.1 * position)
            scores[chunk_id] = max(scores.get(chunk_id, 0.0), value)
    return await hydrate(view, ranked(scores, Counter()), scores, top_k)
