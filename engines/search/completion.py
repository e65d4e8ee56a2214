"""Score completion: each text channel scores the chunks the other found and it did not list.

Convex fusion (`engines.fuse.rrf`) min-max normalises a channel's scores over the list it
returned and counts 0 for a chunk it did not list. A chunk that dense search ranked first and
BM25 ranked 21st (one past its list) then gets nothing from BM25, not the fair share its
score would have earned. So once the vector and sparse channels have answered, each is asked
for its exact score of the other's chunks it did not list (`VectorStore.dense_scores`,
`sparse_scores`: a query restricted to those ids, at most a list's length of points), and
those join the end of its list marked `RetrievedChunk.completion`: score fusion normalises and
weighs them with the listed chunks; rank fusion, the channel's count and the ranking a request
reports leave them out (`contracts.models.listed`).

Measured before it was built, on each set's own chunks with the product's chunking, encoder
and fusion functions and a plain BM25 (`studies.completion_study`,
results/completion-study.json): dense+BM25 convex fusion, 20 a channel, nDCG@10 without and
with completion: NFCorpus dev 0.329 → 0.336, test 0.350 → 0.359, MuSiQue 0.662 → 0.666,
Cranfield 0.417 → 0.438 (where the channels' own lists lost to reciprocal ranks, 0.423).

The BM25 variant only: a sparse model's (BGE-M3's) query encoding is a forward pass, which a
completion would pay twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contracts.enums import Channel
from contracts.models import RetrievedChunk
from infra.retrieval.lexical import SparseVec
from infra.retrieval.vectors.codec import unpack_query

if TYPE_CHECKING:
    from infra.runtime.resources import Resources

COMPLETED = (Channel.VECTOR, Channel.SPARSE)
"""The channels that complete each other: both score any chunk of the store."""


def _completions(missing: list[RetrievedChunk], scores: dict[str, float]) -> list[RetrievedChunk]:
    """The missing chunks as the channel scores them, best first (0 for a chunk without one:
    a BM25 score of a chunk that holds none of the query's terms)."""
    scored = [
        chunk.model_copy(
            update={
                "score": scores.get(chunk.chunk_id, 0.0),
                "rank": 0,
                "channels": {},
                "completion": True,
            }
        )
        for chunk in missing
    ]
    return sorted(scored, key=lambda chunk: -chunk.score)


async def complete(
    resources: Resources,
    query: str,
    query_vector: str | None,
    rankings: dict[Channel, list[RetrievedChunk]],
    terms: SparseVec | None = None,
) -> dict[Channel, list[RetrievedChunk]]:
    """Each text channel's completions for `query` (`rankings` holds their own lists; the
    query's packed embedding, which the dense channel searched with; `terms`, the sparse
    query it searched with when not the query's own, `engines.search.feedback`): none unless
    both answered and a chunk is missing from one of them."""
    if not all(rankings.get(channel) for channel in COMPLETED):
        return {}
    vector_ids = {chunk.chunk_id for chunk in rankings[Channel.VECTOR]}
    sparse_ids = {chunk.chunk_id for chunk in rankings[Channel.SPARSE]}
    for_vector = [c for c in rankings[Channel.SPARSE] if c.chunk_id not in vector_ids]
    for_sparse = [c for c in rankings[Channel.VECTOR] if c.chunk_id not in sparse_ids]
    store = await resources.vectors()
    out: dict[Channel, list[RetrievedChunk]] = {}
    vector = unpack_query(query_vector, store.dim)
    if for_vector and vector is not None:
        scores = await store.read(store.dense_scores, for_vector, vector)
        out[Channel.VECTOR] = _completions(for_vector, scores)
    sparse = await resources.sparse()
    if for_sparse and sparse.idf_modifier:
        indices, values = terms or sparse.query(query)
        scores = await store.read(store.sparse_scores, for_sparse, indices, values)
        out[Channel.SPARSE] = _completions(for_sparse, scores)
    return out
