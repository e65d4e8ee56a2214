"""Accept or retry, and when retrying, which lever to pull.

The strategy follows the weakest link: weak or scarce evidence → `broaden` the search;
evidence fine but the question's terms missing → `rebalance` the channel weights;
answer not backed by what it cites → `rewrite` the query as plain keywords.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from contracts.models import ToolOutcome
from infra.text import STOP_WORDS, stem
from workers.critic.scoring import Scores

WEAK_RETRIEVAL: Final = 0.25
"""MiniLM puts a relevant passage at ~0.3-0.7 cosine to its question, unrelated text near 0."""
FEW_CONTEXTS: Final = 2
LOW_COVERAGE: Final = 0.5
LOW_GROUNDING: Final = 0.5
TOOL_OK_CONFIDENCE: Final = 0.9
TOOL_FAILED_CONFIDENCE: Final = 0.3

Strategy = Literal["broaden", "rebalance", "rewrite"]


@dataclass(frozen=True)
class Verdict:
    verdict: Literal["accept", "retry"]
    confidence: float
    strategy: Strategy | None = None
    rewritten_query: str | None = None
    reasons: list[str] = field(default_factory=list)


def keyword_query(query: str) -> str:
    """The query's content words, first spelling of each stem, as a keyword query."""
    seen: set[str] = set()
    words: list[str] = []
    for word in (w.strip("'") for w in query.lower().split()):
        word = "".join(ch for ch in word if ch.isalnum() or ch in "-_")
        if not word or word in STOP_WORDS:
            continue
        key = stem(word)
        if key not in seen:
            seen.add(key)
            words.append(word)
    return " ".join(words) or query.strip()


def judge_answer(
    query: str,
    scores: Scores,
    contexts: int,
    attempts_left: int,
    accept_at: float,
    expansion: str | None = None,
) -> Verdict:
    """`expansion`: the question with bridge terms from the first passages (`expansion.py`),
    searched on a `rebalance` retry, where the question's own terms were not enough."""
    confidence = round(scores.confidence, 4)
    if confidence >= accept_at:
        return Verdict("accept", confidence, reasons=["the answer is grounded in its sources"])
    if attempts_left == 0:
        return Verdict("accept", confidence, reasons=["attempts spent: low confidence"])

    if scores.retrieval < WEAK_RETRIEVAL or contexts < FEW_CONTEXTS:
        why = "few contexts were found" if contexts < FEW_CONTEXTS else "retrieval was weak"
        return Verdict("retry", confidence, "broaden", reasons=[f"{why}: broaden the search"])
    if scores.coverage < LOW_COVERAGE:
        reasons = ["the answer misses terms of the question: rebalance the channels"]
        if expansion:
            reasons.append("and search for what the best passages name besides the question")
        return Verdict("retry", confidence, "rebalance", rewritten_query=expansion, reasons=reasons)
    if scores.grounding < LOW_GROUNDING:
        return Verdict(
            "retry",
            confidence,
            "rewrite",
            rewritten_query=keyword_query(query),
            reasons=["the answer is poorly supported by its citations: rewrite the query"],
        )
    return Verdict(
        "retry", confidence, "broaden", reasons=["confidence is low: broaden the search"]
    )


def judge_tools(outcomes: Sequence[ToolOutcome], attempt: int, attempts_left: int) -> Verdict:
    """A tool answer stands or falls with its tools: all ok is accepted; a failure is
    retried once, then accepted with the failure stated in the answer."""
    failed = [o for o in outcomes if not o.ok]
    if not failed:
        return Verdict("accept", TOOL_OK_CONFIDENCE, reasons=["every tool call succeeded"])
    names = ", ".join(sorted({o.name for o in failed}))
    if attempt == 1 and attempts_left > 0:
        return Verdict(
            "retry",
            TOOL_FAILED_CONFIDENCE,
            "rewrite",
            reasons=[f"{names} failed: trying once more"],
        )
    return Verdict(
        "accept",
        TOOL_FAILED_CONFIDENCE,
        reasons=[f"{names} failed: the answer states the failure"],
    )
