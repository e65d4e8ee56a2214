"""Accept, retry, or answer with a stated low confidence, and when retrying, which lever to pull.

An answer is accepted when its confidence reaches `RAGBUS_CRITIC_ACCEPT`, unless it leaves
a third of the question's terms uncovered while its best passages name a bridge to follow:
that is how a multi-hop question's first attempt looks (the first hop found, the next one
not), and on MuSiQue train-100 such first attempts missed a supporting document 77% of the
time against 59% overall.

The strategy follows the weakest link: weak or scarce evidence → `broaden` the search;
question terms missing → `decompose` it into follow-up queries about the bridges the best
passages name (`decompose.py`), or, when they name none, `rebalance` the channel weights;
answer not backed by what it cites → `rewrite` the query as plain keywords; otherwise follow
up on the bridges when there are any, and broaden when there are none.

When the attempts are spent, an answer that would have been retried is given with the verdict
`low_confidence`, and the orchestrator adds a note saying why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from contracts.models import ToolOutcome
from engines.critic.scoring import Scores
from infra.retrieval.lexical import STOP_WORDS, stem

WEAK_RETRIEVAL: Final = 0.25
"""MiniLM puts a relevant passage at ~0.3-0.7 cosine to its question, unrelated text near 0."""
FEW_CONTEXTS: Final = 2
INCOMPLETE_COVERAGE: Final = 2 / 3
"""Below this share of the question's terms covered, a part of the question is unanswered."""
LOW_GROUNDING: Final = 0.5
TOOL_OK_CONFIDENCE: Final = 0.9
TOOL_FAILED_CONFIDENCE: Final = 0.3

Strategy = Literal["broaden", "rebalance", "rewrite", "decompose"]
VerdictKind = Literal["accept", "retry", "low_confidence"]


@dataclass(frozen=True)
class Verdict:
    verdict: VerdictKind
    confidence: float
    strategy: Strategy | None = None
    rewritten_query: str | None = None
    reasons: list[str] = field(default_factory=list)
    sub_queries: list[str] = field(default_factory=list)


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
    sub_queries: Sequence[str] = (),
) -> Verdict:
    """`sub_queries`: follow-up queries about the bridges the passages name (`decompose.py`)."""
    confidence = round(scores.confidence, 4)
    confident = confidence >= accept_at
    incomplete = scores.coverage < INCOMPLETE_COVERAGE and bool(sub_queries)
    if confident and (not incomplete or attempts_left == 0):
        return Verdict("accept", confidence, reasons=["the answer is grounded in its sources"])
    weakness, retry = _retry(query, scores, contexts, confidence, sub_queries)
    if attempts_left == 0:
        return Verdict("low_confidence", confidence, reasons=[weakness])
    return retry


def _retry(
    query: str, scores: Scores, contexts: int, confidence: float, sub_queries: Sequence[str]
) -> tuple[str, Verdict]:
    """The weakest signal, and the retry that pulls its lever."""

    def retry(
        weakness: str,
        strategy: Strategy,
        lever: str,
        rewritten_query: str | None = None,
        sub_queries: Sequence[str] = (),
    ) -> Verdict:
        reasons = [f"{weakness}: {lever}"]
        return Verdict(
            "retry", confidence, strategy, rewritten_query, reasons, sub_queries=list(sub_queries)
        )

    follow_up = "follow up on what the best passages name"
    if scores.retrieval < WEAK_RETRIEVAL or contexts < FEW_CONTEXTS:
        why = "few contexts were found" if contexts < FEW_CONTEXTS else "retrieval was weak"
        return why, retry(why, "broaden", "broaden the search")
    if scores.coverage < INCOMPLETE_COVERAGE:
        why = "the answer misses terms of the question"
        if sub_queries:
            return why, retry(why, "decompose", follow_up, sub_queries=sub_queries)
        return why, retry(why, "rebalance", "rebalance the channels")
    if scores.grounding < LOW_GROUNDING:
        why = "the answer is poorly supported by its citations"
        return why, retry(why, "rewrite", "rewrite the query", rewritten_query=keyword_query(query))
    why = "confidence is low"
    if sub_queries:
        return why, retry(why, "decompose", follow_up, sub_queries=sub_queries)
    return why, retry(why, "broaden", "broaden the search")


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
