"""The default generator: picks the best sentences of the contexts and cites each one.

No language model, so nothing is made up: every sentence of the answer is a sentence of
a context, followed by `[n]`, the number of that context in the order it was given.
Sentences are scored by embedding cosine to the query blended with content-word overlap. The
embeddings are the sentence vectors ingestion stored with each chunk and the query vector
classify made: no encoder runs here unless a context or a query came without them. Sentences
are picked with maximal marginal relevance (relevant, but not saying the same thing twice),
and shown in the order of the contexts they came from. A picked sentence that opens with a
pronoun ("It was founded ...") brings the sentence before it along, so the reader learns what
"it" is. After a decomposition, a sentence also counts for the follow-up queries (at
`FOLLOW_UP_WEIGHT`), so the second hop's answer is picked, not only the first's.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

import numpy as np

from contracts.models import RetrievedChunk
from infra.retrieval.lexical import analyze
from infra.retrieval.vectors.codec import chunk_sentences

MAX_SENTENCES: Final = 4
MIN_SENTENCES: Final = 2
MAX_CANDIDATES: Final = 240
"""Encoding cost bound: at ~250 sentences/s this keeps generation well under a second."""

SEMANTIC_WEIGHT: Final = 0.65
MMR_LAMBDA: Final = 0.7
DUPLICATE_COSINE: Final = 0.9
WEAK_SHARE: Final = 0.6
"""Past the minimum, stop adding sentences scoring below this share of the best one."""
OFF_TOPIC_SHARE: Final = 0.35
"""Even to reach the minimum, never add a sentence scoring below this share of the best."""
FOLLOW_UP_WEIGHT: Final = 0.8
"""A sentence's relevance to a follow-up query counts this much of relevance to the question.
Measured offline on the 96 MuSiQue train-100 questions with follow-ups: reference answers found
0.344 with the question alone, 0.375 at 0.8 (0.365-0.375 anywhere from 0.5 to 0.85)."""
NO_ANSWER_BELOW: Final = 0.15
"""If even the best sentence scores below this, the contexts do not answer the query."""

_ANAPHOR = re.compile(
    r"^(?:it|its|he|his|him|she|her|they|their|them|this|these|those|such|both|"
    r"the (?:latter|former|same))\b",
    re.IGNORECASE,
)
_TRAILING_PUNCT = re.compile(r"([.!?…:;]+)([\"'”’)]*)$")


@dataclass(frozen=True)
class Candidate:
    context: int
    """1-based number of the context the sentence comes from."""
    position: int
    text: str
    terms: frozenset[str]
    vector: np.ndarray | None = field(default=None, compare=False, repr=False)
    """Its stored embedding, when the context came with its sentences' vectors."""


class Encoding(Protocol):
    async def aencode(self, texts: list[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class Answer:
    text: str
    citations: dict[int, str]
    """citation number -> chunk_id, for the numbers that appear in `text` only."""
    sentences: int
    encoded: int = 0
    """Texts the encoder had to embed (0 when the request and the contexts carried vectors)."""


def no_evidence_answer(query: str) -> Answer:
    return Answer(
        text=f"I could not find anything in the indexed documents about “{query.strip()}”.",
        citations={},
        sentences=0,
    )


def candidates(contexts: Sequence[RetrievedChunk]) -> list[Candidate]:
    """The contexts' sentences, numbered by context; too-short fragments and repeats go."""
    found: list[Candidate] = []
    fallback: list[Candidate] = []
    seen: set[str] = set()
    for number, chunk in enumerate(contexts, start=1):
        for position, (text, vector) in enumerate(chunk_sentences(chunk)):
            key = text.lower()
            if not text or key in seen:
                continue
            seen.add(key)
            candidate = Candidate(number, position, text, frozenset(analyze(text)), vector)
            (found if len(text.split()) >= 4 and candidate.terms else fallback).append(candidate)
    return (found or fallback)[:MAX_CANDIDATES]


def _lexical(query_terms: frozenset[str], terms: frozenset[str]) -> float:
    return len(query_terms & terms) / len(query_terms) if query_terms else 0.0


def select(relevance: np.ndarray, similarity: np.ndarray, k: int = MAX_SENTENCES) -> list[int]:
    """Maximal marginal relevance over candidates; near-duplicates are never both taken."""
    chosen: list[int] = []
    remaining = set(range(len(relevance)))
    best = float(relevance.max()) if len(relevance) else 0.0
    while remaining and len(chosen) < k:

        def mmr(i: int) -> float:
            redundancy = max((similarity[i, j] for j in chosen), default=0.0)
            return MMR_LAMBDA * relevance[i] - (1 - MMR_LAMBDA) * redundancy

        pick = max(sorted(remaining), key=mmr)
        remaining.discard(pick)
        if any(similarity[pick, j] >= DUPLICATE_COSINE for j in chosen):
            continue
        floor = WEAK_SHARE if len(chosen) >= MIN_SENTENCES else OFF_TOPIC_SHARE
        if chosen and relevance[pick] < floor * best:
            break
        chosen.append(pick)
    return chosen


def _with_marker(sentence: str, number: int) -> str:
    """`Text [n].` — the marker inside the sentence, so a sentence splitter keeps them together."""
    match = _TRAILING_PUNCT.search(sentence)
    if match is None:
        return f"{sentence} [{number}]."
    return f"{sentence[: match.start()]} [{number}]{match.group(1)}{match.group(2)}"


def with_antecedents(
    chosen: Sequence[Candidate], contexts: Sequence[RetrievedChunk]
) -> list[Candidate]:
    """The chosen sentences, each one that opens with a pronoun preceded by the sentence
    before it in its context (when that one was not chosen already)."""
    taken = {(c.context, c.position) for c in chosen}
    out = list(chosen)
    for candidate in chosen:
        before = (candidate.context, candidate.position - 1)
        if candidate.position == 0 or before in taken or not _ANAPHOR.match(candidate.text):
            continue
        text = chunk_sentences(contexts[candidate.context - 1])[before[1]][0]
        if text:
            taken.add(before)
            out.append(Candidate(*before, text, frozenset(analyze(text))))
    return out


def compose(chosen: Sequence[Candidate], contexts: Sequence[RetrievedChunk]) -> Answer:
    ordered = sorted(with_antecedents(chosen, contexts), key=lambda c: (c.context, c.position))
    text = " ".join(_with_marker(c.text, c.context) for c in ordered)
    citations = {c.context: contexts[c.context - 1].chunk_id for c in ordered}
    return Answer(text=text, citations=dict(sorted(citations.items())), sentences=len(ordered))


async def embeddings(
    pool: Sequence[Candidate],
    asked: Sequence[str],
    known: Mapping[str, np.ndarray],
    encoder: Encoding,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Vectors of the asked queries and of the candidates: the ones that came with the request
    or the contexts, and one encoder call for whatever did not; also how many were encoded."""
    missing = [q for q in asked if q not in known]
    missing += [c.text for c in pool if c.vector is None]
    made: dict[str, np.ndarray] = {}
    if missing:
        distinct = list(dict.fromkeys(missing))
        rows = np.asarray(await encoder.aencode(distinct), dtype=np.float32)
        made = dict(zip(distinct, rows, strict=True))
    queries = np.stack([known[q] if q in known else made[q] for q in asked])
    sentences = np.stack([c.vector if c.vector is not None else made[c.text] for c in pool])
    return queries, sentences.astype(np.float32, copy=False), len(made)


async def extractive_answer(
    query: str,
    contexts: Sequence[RetrievedChunk],
    encoder: Encoding,
    follow_ups: Sequence[str] = (),
    query_vectors: Mapping[str, np.ndarray] | None = None,
) -> Answer:
    """The 2-4 sentences of the contexts that best answer the query (or, discounted, its
    follow-up queries), each cited.

    Fewer when only one sentence is on topic; none (an honest "not found") when nothing is.
    `query_vectors` are the request's embeddings of the query and the follow-ups, by text;
    `encoder` makes only what neither they nor the contexts' stored vectors provide.
    """
    pool = candidates(contexts)
    if not pool:
        return no_evidence_answer(query)
    asked = [query, *follow_ups]
    query_rows, sentence_vectors, encoded = await embeddings(
        pool, asked, query_vectors or {}, encoder
    )
    relevance = np.zeros(len(pool))
    for index, text in enumerate(asked):
        semantic = np.clip(sentence_vectors @ query_rows[index], 0.0, 1.0)
        terms = frozenset(analyze(text))
        lexical = np.array([_lexical(terms, c.terms) for c in pool])
        weight = 1.0 if index == 0 else FOLLOW_UP_WEIGHT
        blended = SEMANTIC_WEIGHT * semantic + (1 - SEMANTIC_WEIGHT) * lexical
        relevance = np.maximum(relevance, weight * blended)
    if float(relevance.max()) < NO_ANSWER_BELOW:
        return no_evidence_answer(query)
    chosen = select(relevance, sentence_vectors @ sentence_vectors.T)
    answer = compose([pool[i] for i in chosen], contexts)
    return dataclasses.replace(answer, encoded=encoded)
