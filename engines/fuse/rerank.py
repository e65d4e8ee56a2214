"""Optional second stage after fusion: a cross-encoder reorders the best fused chunks.

The first `top_n` fused chunks are scored against the query and sorted by that score (ties keep
their fused order); the rest follow in fused order. A reranked chunk's `score` becomes its
cross-encoder relevance in (0, 1), the others keep their RRF score, and `rank` is renumbered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from contracts.models import RetrievedChunk


class Scorer(Protocol):
    async def ascore(self, query: str, passages: list[str]) -> list[float]: ...


def passage_text(chunk: RetrievedChunk) -> str:
    """What the cross-encoder reads: the title gives a short passage its context."""
    return f"{chunk.title}\n{chunk.text}" if chunk.title else chunk.text


async def rerank(
    scorer: Scorer, query: str, fused: Sequence[RetrievedChunk], top_n: int
) -> tuple[list[RetrievedChunk], int]:
    """`fused` with its first `top_n` chunks reordered by the scorer; returns (chunks, n scored)."""
    head, tail = list(fused[:top_n]), list(fused[top_n:])
    if not head:
        return list(fused), 0
    scores = await scorer.ascore(query, [passage_text(chunk) for chunk in head])
    if len(scores) != len(head):
        raise ValueError(f"reranker returned {len(scores)} scores for {len(head)} passages")
    order = sorted(range(len(head)), key=lambda i: -scores[i])  # stable: ties keep RRF order
    reranked = [head[i].model_copy(update={"score": float(scores[i])}) for i in order]
    out = [
        chunk.model_copy(update={"rank": rank})
        for rank, chunk in enumerate(reranked + tail, start=1)
    ]
    return out, len(head)
