"""Pseudo-relevance feedback: the text channels search again with what their first hits say.

A question's words are a few of the words its answers use. Once the vector and sparse
channels have answered (and completed each other, `engines.search.completion`), the best
chunks of the two fused are taken as relevant, and each channel searches once more:
- the vector channel with the query's embedding moved toward the mean embedding of the three
  best chunks, q + 0.5 · mean (Rocchio, 1971; as a dense retriever's feedback, Li et al.,
  "Pseudo Relevance Feedback with Deep Language Models and Dense Retrievers: Successes and
  Pitfalls", ACM TOIS 2023);
- the sparse channel with RM3 (Abdul-Jaleel et al., TREC 2004, at Anserini's defaults): the
  ten terms most likely in its ten best chunks, weighted by those chunks' scores, mixed half
  and half with the question's own terms.
Their new lists replace the first ones, and are completed again.

**Not for a question that names a particular thing.** Feedback widens a question to its
topic; one about a particular thing that the collection has a document on ("who founded
Publix?", the first hop of a multi-hop question) drifts toward the first thing named and loses
the rest. So a question that names a document's title keeps the channels' first lists, unless
the collection mentions that title as often as a generic entity (`GraphStore.
particular_titles`: "Diet" titles a page of a nutrition collection and is in 7 % of its
chunks, a topic rather than a thing). Without feedback the fusion keeps the graph channels;
with it, it reads the text channels alone (`engines.fuse.rrf.question_weights`).

Measured before it was built (`studies.feedback_study`, results/feedback-study.json;
the product's chunks, encoder and fusion functions, the two text channels, nDCG@10 against
convex fusion of the completed lists): NFCorpus dev +0.009, test +0.015, Cranfield +0.019,
MuSiQue −0.007 (without the title rule −0.057); through the pipeline, docs/evaluation.md.
BM25 only: a sparse model's (BGE-M3's) query weights are a forward pass, not term counts.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import numpy as np

from contracts.commands import SearchCommand
from contracts.enums import Channel
from contracts.models import RetrievedChunk, listed
from engines.fuse.rrf import weighted_convex
from infra.retrieval.entities import normalize
from infra.retrieval.intent_profiles import PRIOR
from infra.retrieval.lexical import SparseVec, analyze, term_id
from infra.retrieval.scope import where_of
from infra.retrieval.vectors.codec import pack_query, unpack_query

if TYPE_CHECKING:
    from infra.runtime.resources import Resources

FEEDBACK_CHUNKS: Final = 3
FEEDBACK_WEIGHT: Final = 0.5
RM3_CHUNKS: Final = 10
RM3_TERMS: Final = 10
RM3_ORIGINAL: Final = 0.5
MAX_TITLE_WORDS: Final = 6
TITLE_SCAN_WORDS: Final = 64
"""A question names its subject early; a 4,000-character one is not read for titles whole."""
TEXT_WEIGHTS: Final = {Channel.VECTOR: PRIOR[Channel.VECTOR], Channel.SPARSE: PRIOR[Channel.SPARSE]}
"""The first lists are fused by the prior's text weights to pick the feedback chunks."""


def title_candidates(query: str) -> list[str]:
    """Every span of up to `MAX_TITLE_WORDS` words of the query's first `TITLE_SCAN_WORDS`,
    normalised as titles are (`infra.retrieval.entities.title_norms`), longest first."""
    words = query.split()[:TITLE_SCAN_WORDS]
    spans = (
        normalize(words[i : i + n])
        for n in range(min(MAX_TITLE_WORDS, len(words)), 0, -1)
        for i in range(len(words) - n + 1)
    )
    return list(dict.fromkeys(span for span in spans if span))


def moved(vector: np.ndarray, feedback: Sequence[np.ndarray]) -> np.ndarray:
    """The query's embedding moved toward its feedback chunks' mean, unit length again."""
    if not feedback:
        return vector
    shifted = vector + FEEDBACK_WEIGHT * np.mean(np.asarray(feedback, dtype=np.float32), axis=0)
    norm = float(np.linalg.norm(shifted))
    return (shifted / norm).astype(np.float32) if norm else vector


def rm3(query: str, feedback: Sequence[tuple[str, float]]) -> dict[str, float]:
    """The question's analysed terms mixed half and half with the likeliest terms of its
    feedback chunks (`(text, score)`, each weighted by its share of their scores)."""
    own = Counter(analyze(query))
    scored = [(analyze(text), score) for text, score in feedback if score > 0]
    total = sum(score for _, score in scored)
    if not own or not total:
        return dict.fromkeys(own, 1.0)
    model: defaultdict[str, float] = defaultdict(float)
    for terms, score in scored:
        for term, tf in Counter(terms).items():
            model[term] += score / total * tf / len(terms)
    best = dict(sorted(model.items(), key=lambda item: -item[1])[:RM3_TERMS])
    norm = sum(best.values()) or 1.0
    mixed: defaultdict[str, float] = defaultdict(float)
    for term, tf in own.items():
        mixed[term] += RM3_ORIGINAL * tf / sum(own.values())
    for term, p in best.items():
        mixed[term] += (1 - RM3_ORIGINAL) * p / norm
    return dict(mixed)


def sparse_query(terms: dict[str, float]) -> SparseVec:
    """Weighted terms as a BM25 query vector (term ids, weights; terms that hash alike add)."""
    weights: defaultdict[int, float] = defaultdict(float)
    for term, weight in terms.items():
        weights[term_id(term)] += weight
    indices = sorted(weights)
    return indices, [weights[i] for i in indices]


async def search_again(
    resources: Resources,
    cmd: SearchCommand,
    query_vector: str | None,
    rankings: dict[Channel, list[RetrievedChunk]],
) -> tuple[dict[Channel, list[RetrievedChunk]], str, SparseVec] | None:
    """The vector and sparse channels' new lists, the moved query embedding (packed) and the
    weighted terms they searched with; None where feedback does not apply: a channel did not
    answer, the sparse side is not BM25, or the question names a particular document's title
    (`GraphStore.particular_titles`)."""
    if not all(rankings.get(channel) for channel in TEXT_WEIGHTS):
        return None
    store, sparse = await resources.vectors(), await resources.sparse()
    vector = unpack_query(query_vector, store.dim)
    if vector is None or not sparse.idf_modifier:
        return None
    graph, candidates = await resources.graph(), title_candidates(cmd.query)
    if candidates and await graph.particular_titles(cmd.namespaces, candidates):
        return None
    first = weighted_convex(
        {channel: rankings[channel] for channel in TEXT_WEIGHTS},
        TEXT_WEIGHTS,
        top_k=FEEDBACK_CHUNKS,
    )
    by_sparse = listed(rankings[Channel.SPARSE])[:RM3_CHUNKS]
    wanted = list({chunk.chunk_id: chunk for chunk in [*first, *by_sparse]}.values())
    stored = await store.read(store.passages, wanted)
    dense = [stored[chunk.chunk_id][1] for chunk in first if chunk.chunk_id in stored]
    terms = sparse_query(
        rm3(
            cmd.query, [(stored[c.chunk_id][0], c.score) for c in by_sparse if c.chunk_id in stored]
        )
    )
    new_vector = moved(vector, dense)
    where = where_of(cmd.filter, cmd.reader)
    return (
        {
            Channel.VECTOR: await store.read(
                store.search_dense,
                cmd.namespaces,
                new_vector,
                cmd.top_k,
                where,
                heavy=not store.quick(cmd.namespaces, where),
            ),
            Channel.SPARSE: await store.read(
                store.search_sparse,
                cmd.namespaces,
                *terms,
                cmd.top_k,
                where,
                heavy=not store.quick(cmd.namespaces, where),
            ),
        },
        pack_query(new_vector),
        terms,
    )
