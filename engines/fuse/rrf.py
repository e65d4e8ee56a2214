"""Intent-weighted fusion of the channels' rankings, by score or by rank.

- `convex` (the default, `RAGBUS_FUSION`): `score(chunk) = Σ_c w_c · norm_c(chunk)`, each
  channel's scores min-max normalised over the list it returned (0 where it did not rank the
  chunk). A convex combination of normalised scores keeps how *much* better a channel's first
  hit is than its tenth, which ranks throw away (Bruch, Gai and Ingber, "An Analysis of Fusion
  Functions for Hybrid Retrieval", ACM TOIS 2023). Measured against RRF on the same requests'
  channel rankings, `python -m studies.fusion_study` (docs/evaluation.md).
- `rrf`: `score(chunk) = Σ_c w_c / (k + rank_c(chunk))` over the channels that ranked it.

`w_c` are the *effective* weights either way: a channel that returned nothing (failed, timed
out, or simply empty) gives its weight to the others in proportion, so the fused scores keep
the intent's balance between the channels that did answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from contracts.enums import Channel
from contracts.models import RetrievedChunk, listed, scored

Weights = Mapping[Channel, float]
ChannelResults = Mapping[Channel, Sequence[RetrievedChunk]]


Fusion = Literal["convex", "rrf"]
Contributions = Callable[[Sequence[RetrievedChunk]], list[float]]
"""A channel's list -> what each of its chunks adds to the fused score (before the weight)."""


def effective_weights(weights: Weights, results: ChannelResults) -> dict[Channel, float]:
    """Weights renormalised over the channels that returned results (all zero if none did).

    When every answering channel had weight 0 (a summary profile with only sparse hits,
    say), they share equally: some evidence beats none.
    """
    answering = [c for c in Channel if results.get(c)]
    out = dict.fromkeys(Channel, 0.0)
    if not answering:
        return out
    total = sum(max(weights.get(c, 0.0), 0.0) for c in answering)
    for channel in answering:
        if total > 0:
            out[channel] = max(weights.get(channel, 0.0), 0.0) / total
        else:
            out[channel] = 1.0 / len(answering)
    return out


GRAPH_CHANNELS: tuple[Channel, ...] = (Channel.GRAPH_LOCAL, Channel.GRAPH_GLOBAL)


def searched_again(results: ChannelResults) -> bool:
    """Whether a text channel carries a feedback search (`RetrievedChunk.feedback`): the
    search worker runs one only for a question that names no particular thing."""
    return any(chunk.feedback for chunks in results.values() for chunk in chunks)


def question_weights(weights: Weights, results: ChannelResults) -> dict[Channel, float]:
    """The intent's weights, with the graph channels at 0 where the text channels searched
    again (`engines.search.feedback`). The graph ranks chunks by the entities a question
    names; a question that names no particular thing is about a topic, which the text
    channels' second search has widened to, and the graph's order only pulls their hits
    apart. Its chunks stay in the fused list, after every chunk the text channels score.
    Measured through the pipeline (docs/evaluation.md → "Topical questions: generic titles
    and the graph")."""
    if not searched_again(results):
        return dict(weights)
    return {c: 0.0 if c in GRAPH_CHANNELS else w for c, w in weights.items()}


def _merge(kept: RetrievedChunk, other: RetrievedChunk) -> RetrievedChunk:
    """Fill the best-ranked copy's empty descriptive fields from another channel's copy."""
    updates = {
        name: getattr(other, name)
        for name in ("title", "source", "section")
        if not getattr(kept, name) and getattr(other, name)
    }
    if kept.page is None and other.page is not None:
        updates.update(page=other.page, page_label=other.page_label)
    return kept.model_copy(update=updates) if updates else kept


def fuse(
    results: ChannelResults,
    weights: Weights,
    *,
    method: Fusion = "convex",
    k: int = 60,
    top_k: int,
) -> list[RetrievedChunk]:
    """Fuse the channels' rankings by `method`: `weighted_convex` or `weighted_rrf`."""
    if method == "rrf":
        return weighted_rrf(results, weights, k=k, top_k=top_k)
    return weighted_convex(results, weights, top_k=top_k)


def weighted_rrf(
    results: ChannelResults, weights: Weights, *, k: int = 60, top_k: int
) -> list[RetrievedChunk]:
    """Fuse the channels' rankings into one list of at most `top_k` chunks, best first.

    A chunk found by several channels appears once, with `channels = {channel: rank}`
    for each of them, `score` = its fused score and `rank` = its 1-based fused rank.
    """
    ranked = {channel: listed(chunks) for channel, chunks in results.items()}
    return weighted_fusion(
        ranked,  # ranks only: a channel's completions are scores, not ranks
        weights,
        lambda chunks: [1.0 / (k + i) for i in range(1, len(chunks) + 1)],
        top_k=top_k,
    )


def min_max(chunks: Sequence[RetrievedChunk]) -> list[float]:
    """Each chunk's score scaled to [0, 1] over its channel's list (all 1 when they tie)."""
    if not chunks:
        return []
    low = min(chunk.score for chunk in chunks)
    span = max(chunk.score for chunk in chunks) - low
    return [(chunk.score - low) / span if span > 0 else 1.0 for chunk in chunks]


def weighted_convex(
    results: ChannelResults, weights: Weights, *, top_k: int
) -> list[RetrievedChunk]:
    """As `weighted_rrf`, with each channel's min-max normalised scores in place of its
    reciprocal ranks: `score = Σ_c w_c · min_max_c(chunk)`. A channel's completions (its scores
    for chunks another channel found, `engines.search.completion`) are normalised and weighed
    with its own list."""
    return weighted_fusion(results, weights, min_max, top_k=top_k)


def weighted_fusion(
    results: ChannelResults, weights: Weights, contributions: Contributions, *, top_k: int
) -> list[RetrievedChunk]:
    """`score(chunk) = Σ_c w_c · contributions(list_c)[chunk]` with the effective weights: the
    one loop behind `weighted_rrf` and `weighted_convex`, open to other contributions."""
    eff = effective_weights(weights, results)
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    best: dict[str, tuple[int, RetrievedChunk]] = {}
    completed: dict[str, RetrievedChunk] = {}

    for channel in Channel:
        seen: set[str] = set()
        ranking = scored(results.get(channel, ()))
        for position, (chunk, part) in enumerate(
            zip(ranking, contributions(ranking), strict=True), start=1
        ):
            if chunk.chunk_id in seen:  # a channel that repeats itself counts once
                continue
            seen.add(chunk.chunk_id)
            scores[chunk.chunk_id] = scores.get(chunk.chunk_id, 0.0) + eff[channel] * part
            if chunk.completion:  # scored by this channel, ranked by another
                completed.setdefault(chunk.chunk_id, chunk)
                continue
            ranks.setdefault(chunk.chunk_id, {})[channel.value] = position
            previous = best.get(chunk.chunk_id)
            if previous is None:
                best[chunk.chunk_id] = (position, chunk)
            elif position < previous[0]:
                best[chunk.chunk_id] = (position, _merge(chunk, previous[1]))
            else:
                best[chunk.chunk_id] = (previous[0], _merge(previous[1], chunk))

    for cid, chunk in completed.items():  # only ever a completion: kept as a chunk of its own
        if cid not in best:
            best[cid] = (len(scores), chunk.model_copy(update={"completion": False}))
    order = sorted(scores, key=lambda cid: (-scores[cid], best[cid][0], cid))
    return [
        best[cid][1].model_copy(
            # six significant digits: the order is made, and seventeen were bytes on every
            # message that carries the list
            update={
                "score": float(f"{scores[cid]:.6g}"),
                "rank": rank,
                "channels": ranks.get(cid, {}),
                "feedback": False,  # a fused chunk, wherever a channel found it
            }
        )
        for rank, cid in enumerate(order[:top_k], start=1)
    ]


def channel_counts(results: ChannelResults) -> dict[Channel, int]:
    """How many chunks each channel ranked (its completions left out)."""
    return {channel: len(listed(results.get(channel, ()))) for channel in Channel}
