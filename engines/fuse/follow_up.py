"""A decomposed retry builds on the first attempt instead of starting over.

A multi-hop question's first attempt usually finds the first hop and misses the next; the
critic then sends follow-up queries, one per bridge it found (`engines.critic.decompose`).
Their findings are worth most as *additions*: the first attempt's best `KEEP` chunks stay in
place (they hold the first hop), each follow-up query's best `PER_QUERY` chunks not already
there join after them, and the rest of the first attempt's list follows. Inserted chunks carry
`channels["follow_up"]`, their rank in their query's list.

Measured offline on MuSiQue train-100, every question followed up (`decompose.sub_queries`):
recall at 8 (the contexts generation gets) rose 0.688 -> 0.726 over all 100, and 0.470 -> 0.566
over the 59 whose first attempt missed a supporting document. `KEEP` 4-6 and `PER_QUERY` 1-2
all scored within 0.02 of each other. Fusing the lists by RRF instead lowered recall (0.502 ->
0.497 at 10), because a follow-up query's lower ranks are mostly noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from contracts.models import RetrievedChunk

FOLLOW_UP_CHANNEL: Final = "follow_up"
KEEP: Final = 5
"""Chunks of the previous attempt kept ahead of the follow-ups' findings."""
PER_QUERY: Final = 2
"""New chunks each follow-up query adds at most."""


def follow_up(
    carried: Sequence[RetrievedChunk],
    rankings: Sequence[Sequence[RetrievedChunk]],
    top_k: int,
) -> list[RetrievedChunk]:
    """The previous attempt's list with each follow-up ranking's best new chunks inserted
    after its first `KEEP`, cut to `top_k` and ranked 1..n."""
    merged: list[RetrievedChunk] = list(carried[:KEEP])
    taken = {chunk.chunk_id for chunk in merged}
    for ranking in rankings:
        added = 0
        for position, chunk in enumerate(ranking, start=1):
            if added == PER_QUERY:
                break
            if chunk.chunk_id in taken:
                continue
            taken.add(chunk.chunk_id)
            merged.append(_tagged(chunk, position))
            added += 1
    merged.extend(chunk for chunk in carried[KEEP:] if chunk.chunk_id not in taken)
    for ranking in rankings:  # a short previous list leaves room for the follow-ups' rest
        for position, chunk in enumerate(ranking, start=1):
            if len(merged) >= top_k:
                break
            if chunk.chunk_id not in taken:
                taken.add(chunk.chunk_id)
                merged.append(_tagged(chunk, position))
    return [chunk.model_copy(update={"rank": rank}) for rank, chunk in enumerate(merged[:top_k], 1)]


def _tagged(chunk: RetrievedChunk, position: int) -> RetrievedChunk:
    return chunk.model_copy(update={"channels": {**chunk.channels, FOLLOW_UP_CHANNEL: position}})
