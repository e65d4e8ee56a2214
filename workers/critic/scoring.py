"""How much an answer deserves to be believed, from four measurable signals.

    confidence = 0.35·grounding + 0.15·citation_validity + 0.25·coverage + 0.25·retrieval

- grounding: mean over the answer's claim sentences of the support by the contexts it
  cites — max(embedding cosine, share of its content words found in the context);
  a sentence that cites nothing scores 0.
- citation_validity: share of `[n]` markers that point at a context that was given.
- coverage: share of the query's content terms (stemmed) found in the answer or in
  the contexts it cites.
- retrieval: mean similarity to the query of the three most similar contexts.

Every signal and the confidence lie in [0, 1].
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from contracts.models import RetrievedChunk
from infra.text import analyze, split_sentences

if TYPE_CHECKING:
    from infra.encoder import Encoder

WEIGHTS: Final = {"grounding": 0.35, "citation_validity": 0.15, "coverage": 0.25, "retrieval": 0.25}
RETRIEVAL_TOP: Final = 3

_MARKERS = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_STRIP_MARKERS = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")
_ONLY_MARKERS = re.compile(r"^(?:\s*\[\d+(?:\s*,\s*\d+)*\]\s*[.,;:]?)+$")


@dataclass(frozen=True)
class Scores:
    grounding: float
    citation_validity: float
    coverage: float
    retrieval: float

    @property
    def confidence(self) -> float:
        total = sum(weight * getattr(self, name) for name, weight in WEIGHTS.items())
        return min(1.0, max(0.0, total))

    def as_dict(self) -> dict[str, float]:
        return {name: round(value, 4) for name, value in asdict(self).items()}


@dataclass(frozen=True)
class Claim:
    text: str
    markers: list[int]


def claims(answer: str) -> list[Claim]:
    """The answer's sentences with the citation numbers each carries.

    A marker a splitter left at the start of the next sentence ("… done. [2] Next …")
    belongs to the sentence before it.
    """
    out: list[Claim] = []
    for sentence in split_sentences(answer):
        lead = re.match(r"^((?:\s*\[\d+(?:\s*,\s*\d+)*\])+)\s*", sentence)
        if lead and out:
            out[-1].markers.extend(_numbers(lead.group(1)))
            sentence = sentence[lead.end() :]
        if not sentence or _ONLY_MARKERS.match(sentence):
            continue
        text = _STRIP_MARKERS.sub("", sentence).strip()
        out.append(Claim(text, _numbers(sentence)))
    return out


def _numbers(text: str) -> list[int]:
    return [int(n) for group in _MARKERS.findall(text) for n in group.split(",")]


def _containment(claim_terms: set[str], context_terms: set[str]) -> float:
    return len(claim_terms & context_terms) / len(claim_terms) if claim_terms else 0.0


def resolve(citations: Mapping[int, str], contexts: Sequence[RetrievedChunk]) -> dict[int, int]:
    """Citation number -> index into `contexts`, for the citations that point at one."""
    index = {chunk.chunk_id: i for i, chunk in enumerate(contexts)}
    return {n: index[cid] for n, cid in citations.items() if cid in index}


def _grounding(
    found: Sequence[Claim],
    claim_vecs: np.ndarray,
    context_vecs: np.ndarray,
    context_terms: Sequence[set[str]],
    targets: Mapping[int, int],
) -> float:
    support: list[float] = []
    for claim, claim_vec in zip(found, claim_vecs, strict=True):
        terms = set(analyze(claim.text))
        cited = [targets[n] for n in claim.markers if n in targets]
        support.append(
            max(
                (
                    max(float(claim_vec @ context_vecs[i]), _containment(terms, context_terms[i]))
                    for i in cited
                ),
                default=0.0,
            )
        )
    return float(np.clip(np.mean(support), 0.0, 1.0)) if support else 0.0


async def score_answer(
    query: str,
    answer: str,
    citations: Mapping[int, str],
    contexts: Sequence[RetrievedChunk],
    encoder: Encoder,
) -> Scores:
    found = [c for c in claims(answer) if analyze(c.text)]  # sentences that claim something
    targets = resolve(citations, contexts)

    texts = [query] + [c.text for c in found] + [chunk.text for chunk in contexts]
    vectors = np.asarray(await encoder.aencode(texts), dtype=np.float32)
    query_vec, claim_vecs = vectors[0], vectors[1 : 1 + len(found)]
    context_vecs = vectors[1 + len(found) :]
    context_terms = [set(analyze(chunk.text)) for chunk in contexts]

    grounding = _grounding(found, claim_vecs, context_vecs, context_terms, targets)

    markers = _numbers(answer)
    validity = sum(n in targets for n in markers) / len(markers) if markers else 0.0

    query_terms = set(analyze(query))
    cited = {i for c in found for n in c.markers if (i := targets.get(n)) is not None}
    evidence = set(analyze(answer)).union(*(context_terms[i] for i in cited))
    coverage = len(query_terms & evidence) / len(query_terms) if query_terms else 1.0

    top = np.sort(np.clip(context_vecs @ query_vec, 0.0, 1.0))[::-1][:RETRIEVAL_TOP]
    retrieval = float(top.mean()) if top.size else 0.0

    return Scores(grounding, validity, coverage, retrieval)
