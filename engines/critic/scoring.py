"""How much an answer deserves to be believed, from four measurable signals.

    confidence = 0.35·grounding + 0.15·citation_validity + 0.25·coverage + 0.25·retrieval

- grounding: mean over the answer's claim sentences of the support by the contexts it
  cites — max(embedding cosine, share of its content words found in the context);
  a sentence that cites nothing scores 0. With an NLI model configured
  (`RAGBUS_NLI_PATH`) the support of a sentence by a cited context is
  max(embedding cosine, word share, P(the context entails the sentence)): entailment can
  only raise a sentence's support, never lower it, so the model rescues paraphrases
  the lexical and embedding signals miss. The mean entailment of the claim sentences by
  their best cited context is reported as `nli` (not weighted: it acts through
  grounding). An NLI model that fails is logged and skipped: the scores are the ones
  without it, with the error in `nli_error`.
- citation_validity: share of `[n]` markers that point at a context that was given.
- coverage: share of the query's content terms (stemmed) found in the answer or in
  the contexts it cites.
- retrieval: mean similarity to the query of the three most similar contexts.

Every signal and the confidence lie in [0, 1].
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Final, Protocol

import numpy as np

from contracts.models import RetrievedChunk
from infra.logging import get_logger
from infra.retrieval.lexical import analyze
from infra.retrieval.sentences import split_sentences
from infra.retrieval.vectors.codec import chunk_sentences, dense_of


class Encoding(Protocol):
    async def aencode(self, texts: list[str]) -> np.ndarray: ...


WEIGHTS: Final = {"grounding": 0.35, "citation_validity": 0.15, "coverage": 0.25, "retrieval": 0.25}
RETRIEVAL_TOP: Final = 3

log = get_logger(__name__)

_MARKERS = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_STRIP_MARKERS = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")
_ONLY_MARKERS = re.compile(r"^(?:\s*\[\d+(?:\s*,\s*\d+)*\]\s*[.,;:]?)+$")


class Entailment(Protocol):
    """An NLI model as the critic uses it (`infra.retrieval.nli.NliModel`)."""

    async def aentailment(
        self, premises: Sequence[str], hypotheses: Sequence[str]
    ) -> list[float]: ...


@dataclass(frozen=True)
class Scores:
    grounding: float
    citation_validity: float
    coverage: float
    retrieval: float
    nli: float | None = None
    """Mean entailment of the claim sentences by their cited contexts; None = no NLI used."""
    nli_error: str | None = field(default=None, compare=False)
    """Why a configured NLI model was skipped (the other scores are then computed without it)."""

    @property
    def confidence(self) -> float:
        total = sum(weight * getattr(self, name) for name, weight in WEIGHTS.items())
        return min(1.0, max(0.0, total))

    def as_dict(self) -> dict[str, float]:
        """The numeric signals, rounded; `nli` only when an NLI model was used."""
        out: dict[str, float] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[f.name] = round(float(value), 4)
        return out


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
    entailed: Mapping[tuple[int, int], float] | None = None,
) -> float:
    """Mean support; `entailed` maps (claim index, context index) to P(entailment)."""
    entailed = entailed or {}
    support: list[float] = []
    for k, (claim, claim_vec) in enumerate(zip(found, claim_vecs, strict=True)):
        terms = set(analyze(claim.text))
        support.append(
            max(
                (
                    max(
                        float(claim_vec @ context_vecs[i]),
                        _containment(terms, context_terms[i]),
                        entailed.get((k, i), 0.0),
                    )
                    for i in _cited(claim, targets)
                ),
                default=0.0,
            )
        )
    return float(np.clip(np.mean(support), 0.0, 1.0)) if support else 0.0


def _cited(claim: Claim, targets: Mapping[int, int]) -> list[int]:
    """Indexes of the contexts a claim cites, each once, in marker order."""
    return list(dict.fromkeys(targets[n] for n in claim.markers if n in targets))


async def _entailment(
    nli: Entailment,
    found: Sequence[Claim],
    contexts: Sequence[RetrievedChunk],
    targets: Mapping[int, int],
) -> tuple[dict[tuple[int, int], float], float]:
    """P(context entails claim) for every (claim, cited context) pair, in one batched call,
    and the mean over the claims of their best entailment (0 for a claim citing nothing)."""
    pairs = [(k, i) for k, claim in enumerate(found) for i in _cited(claim, targets)]
    probs = (
        await nli.aentailment(
            [contexts[i].text for _, i in pairs], [found[k].text for k, _ in pairs]
        )
        if pairs
        else []
    )
    if len(probs) != len(pairs):
        raise ValueError(f"NLI model gave {len(probs)} probabilities for {len(pairs)} pairs")
    entailed = {pair: float(np.clip(p, 0.0, 1.0)) for pair, p in zip(pairs, probs, strict=True)}
    best = [
        max((entailed[(k, i)] for i in _cited(claim, targets)), default=0.0)
        for k, claim in enumerate(found)
    ]
    return entailed, float(np.mean(best)) if best else 0.0


def _key(sentence: str) -> str:
    """A sentence compared as an answer may end it: the marker `[n].` can add a period."""
    return sentence.rstrip(" .!?…:;").lower()


def _stored(
    found: Sequence[Claim], contexts: Sequence[RetrievedChunk], targets: Mapping[int, int]
) -> tuple[list[np.ndarray | None], list[np.ndarray | None]]:
    """Vectors ingestion stored: each claim's when it is a sentence of a context it cites (an
    extractive answer's always are), each context's own."""
    claim_vecs: list[np.ndarray | None] = []
    sentence_tables: dict[int, dict[str, np.ndarray]] = {}
    for claim in found:
        vector = None
        for i in _cited(claim, targets):
            if i not in sentence_tables:
                sentence_tables[i] = {
                    _key(text): row for text, row in chunk_sentences(contexts[i]) if row is not None
                }
            vector = sentence_tables[i].get(_key(claim.text))
            if vector is not None:
                break
        claim_vecs.append(vector)
    context_vecs = [dense_of(c.vectors) if c.vectors is not None else None for c in contexts]
    return claim_vecs, context_vecs


async def score_answer(
    query: str,
    answer: str,
    citations: Mapping[int, str],
    contexts: Sequence[RetrievedChunk],
    encoder: Encoding,
    nli: Entailment | None = None,
    query_vector: np.ndarray | None = None,
) -> Scores:
    """The four signals; with `nli`, entailment joins the per-sentence support (see above).

    The query's, the claims' and the contexts' vectors come with the request where it has them
    (`query_vector`, the contexts' stored vectors); `encoder` makes only the rest (an LLM's
    sentences, contexts stored without vectors) in one call."""
    found = [c for c in claims(answer) if analyze(c.text)]  # sentences that claim something
    targets = resolve(citations, contexts)

    claim_stored, context_stored = _stored(found, contexts, targets)
    missing = [] if query_vector is not None else [query]
    missing += [c.text for c, v in zip(found, claim_stored, strict=True) if v is None]
    missing += [c.text for c, v in zip(contexts, context_stored, strict=True) if v is None]
    made: dict[str, np.ndarray] = {}
    if missing:
        distinct = list(dict.fromkeys(missing))
        made = dict(zip(distinct, np.asarray(await encoder.aencode(distinct)), strict=True))
    query_vec = query_vector if query_vector is not None else made[query]
    dim = len(query_vec)
    claim_vecs = np.asarray(
        [v if v is not None else made[c.text] for c, v in zip(found, claim_stored, strict=True)],
        dtype=np.float32,
    ).reshape(len(found), dim)
    context_vecs = np.asarray(
        [
            v if v is not None else made[c.text]
            for c, v in zip(contexts, context_stored, strict=True)
        ],
        dtype=np.float32,
    ).reshape(len(contexts), dim)
    context_terms = [set(analyze(chunk.text)) for chunk in contexts]

    entailed: dict[tuple[int, int], float] | None = None
    nli_mean: float | None = None
    nli_error: str | None = None
    if nli is not None:
        try:
            entailed, nli_mean = await _entailment(nli, found, contexts, targets)
        except Exception as exc:  # an optional model must not fail the critique
            log.exception("nli_failed")
            nli_error = f"{type(exc).__name__}: {exc}"[:500]
    grounding = _grounding(found, claim_vecs, context_vecs, context_terms, targets, entailed)

    markers = _numbers(answer)
    validity = sum(n in targets for n in markers) / len(markers) if markers else 0.0

    query_terms = set(analyze(query))
    cited = {i for c in found for n in c.markers if (i := targets.get(n)) is not None}
    evidence = set(analyze(answer)).union(*(context_terms[i] for i in cited))
    coverage = len(query_terms & evidence) / len(query_terms) if query_terms else 1.0

    top = np.sort(np.clip(context_vecs @ query_vec, 0.0, 1.0))[::-1][:RETRIEVAL_TOP]
    retrieval = float(top.mean()) if top.size else 0.0

    return Scores(grounding, validity, coverage, retrieval, nli=nli_mean, nli_error=nli_error)
