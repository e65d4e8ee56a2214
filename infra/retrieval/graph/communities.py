"""Louvain communities of the entity co-occurrence graph, and their summaries: extractive, or
written by a summariser (the LLM's, `infra.retrieval.graph.llm_summaries`) with the extractive
text kept wherever it fails."""

from __future__ import annotations

import asyncio
import math
import random
import threading
from collections import Counter, defaultdict
from collections.abc import Mapping

from infra.logging import get_logger
from infra.retrieval.graph.model import (
    BRIEF_CHUNKS,
    BRIEF_ENTITIES,
    BRIEF_SENTENCES_PER_CHUNK,
    CHUNKS_PER_COMMUNITY,
    COMMUNITY_ENTITIES_PER_CHUNK,
    GENERIC_MIN_DF,
    GENERIC_SHARE,
    SUMMARY_ENTITIES,
    Community,
    CommunityBrief,
    Embed,
    Summarise,
)
from infra.retrieval.sentences import split_sentences

log = get_logger(__name__)

_LOUVAIN_LOCK = threading.Lock()

SUMMARY_CONCURRENCY = 4
MAX_SUMMARY_FAILURES = 3
MAX_SUMMARY_CHARS = 1_200


LOUVAIN_SEED = 42


def louvain(weights: dict[tuple[str, str], float]) -> list[list[str]]:
    """Louvain communities of an undirected weighted graph, by igraph's C implementation
    (`community_multilevel`) with its random choices seeded: networkx's pure-Python Louvain
    took minutes at 100k chunks, in the process that also had to answer queries."""
    import igraph

    names = sorted({key for pair in weights for key in pair})
    index = {name: i for i, name in enumerate(names)}
    graph = igraph.Graph(
        n=len(names), edges=[(index[a], index[b]) for a, b in weights], directed=False
    )
    with _LOUVAIN_LOCK:  # igraph's generator is process-wide
        igraph.set_random_number_generator(random.Random(LOUVAIN_SEED))
        try:
            parts = graph.community_multilevel(weights=list(weights.values()))
        finally:
            igraph.set_random_number_generator(random)
    return [[names[i] for i in members] for members in parts]


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
    weights = {pair: n / math.sqrt(df[pair[0]] * df[pair[1]]) for pair, n in together.items()}
    if not weights:
        return []
    groups = sorted(
        (sorted(g) for g in louvain(weights) if len(g) >= 2), key=lambda g: (-len(g), g[0])
    )
    community_of = {key: index for index, group in enumerate(groups) for key in group}
    strength: dict[str, float] = dict.fromkeys(community_of, 0.0)
    for (a, b), weight in weights.items():
        if a in community_of and community_of.get(b) == community_of[a]:
            strength[a] += weight
            strength[b] += weight
    chunk_score: list[dict[str, float]] = [{} for _ in groups]
    attach: dict[str, Counter[int]] = defaultdict(Counter)
    for chunk_id, keys in chunk_entities.items():
        # Membership tests, not `set - dict.keys()`: that builds a set of every key in the
        # graph for each chunk (quadratic; minutes at 100k chunks).
        members = [k for k in set(keys) if k in community_of]
        outside = [k for k in set(keys) if k not in community_of]
        for key in members:
            scores = chunk_score[community_of[key]]
            scores[chunk_id] = scores.get(chunk_id, 0.0) + strength[key]
        homes = Counter(community_of[k] for k in members)
        for key in outside:
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


def brief(community: Community, names: dict[str, str], texts: dict[str, str]) -> CommunityBrief:
    """What a summariser reads: the strongest entity names, the first sentences of the most
    central chunks, and the extractive summary to fall back on."""
    entities = [names.get(k, k.split("|", 1)[-1]) for k in community.members[:BRIEF_ENTITIES]]
    sentences: list[str] = []
    for chunk_id in community.chunk_ids[:BRIEF_CHUNKS]:
        sentences.extend(split_sentences(texts.get(chunk_id, ""))[:BRIEF_SENTENCES_PER_CHUNK])
    return CommunityBrief(
        key=community.key,
        namespace=community.namespace,
        entities=entities,
        sentences=list(dict.fromkeys(sentences)),
        extractive=summarize(community, names, texts),
    )


def brief_chunk_ids(communities: list[Community]) -> list[str]:
    """The chunks whose text the summaries need (the extractive one reads only the first)."""
    return list(dict.fromkeys(cid for c in communities for cid in c.chunk_ids[:BRIEF_CHUNKS]))


async def _summaries(briefs: list[CommunityBrief], summarise: Summarise) -> list[str]:
    """The summariser's text for each brief, the extractive one wherever it fails or says
    nothing. After `MAX_SUMMARY_FAILURES` failures the rest are not asked: an unreachable
    model costs a few timeouts, not one per community."""
    slots = asyncio.Semaphore(SUMMARY_CONCURRENCY)
    failures = 0

    async def one(item: CommunityBrief) -> str:
        nonlocal failures
        async with slots:
            if failures >= MAX_SUMMARY_FAILURES:
                return item.extractive
            try:
                text = " ".join((await summarise(item)).split())[:MAX_SUMMARY_CHARS]
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                log.warning(
                    "community_summary_fallback",
                    community=item.key,
                    error=str(exc) or type(exc).__name__,
                )
                return item.extractive
            return text or item.extractive

    return list(await asyncio.gather(*(one(item) for item in briefs)))


async def summarise_all(
    communities: list[Community],
    names: dict[str, str],
    texts: dict[str, str],
    embed: Embed | None,
    summarise: Summarise | None = None,
    known_vectors: Mapping[str, list[float]] | None = None,
) -> None:
    """Summaries (the summariser's when given, else extractive), then their vectors: a
    summary with a vector in `known_vectors` (the last recompute's, by summary text) keeps
    it, so a recompute after one document changed embeds the few communities it changed, not
    every community of the corpus (thousands at 20,000 documents: seconds of the encoder)."""
    if summarise is None:
        for community in communities:
            community.summary = summarize(community, names, texts)
    else:
        briefs = [brief(c, names, texts) for c in communities]
        written = await _summaries(briefs, summarise)
        for community, text in zip(communities, written, strict=True):
            community.summary = text
        extractive = sum(text == b.extractive for text, b in zip(written, briefs, strict=True))
        log.info("community_summaries", written=len(written) - extractive, extractive=extractive)
    if embed is None or not communities:
        return
    known = known_vectors or {}
    fresh = [c for c in communities if c.summary not in known]
    for community in communities:
        if community.summary in known:
            community.vector = list(known[community.summary])
    if fresh:
        vectors = await embed([c.summary for c in fresh])
        for community, vector in zip(fresh, vectors, strict=True):
            community.vector = [float(x) for x in vector]
