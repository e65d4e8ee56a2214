"""Regex cues for intents: instant, model-free, and the last resort when the encoder fails.

An arithmetic expression is an unmistakable tool need (confidence `STRONG`); the word cues
are good hints but not proof; a query that matches nothing is `factual` with a confidence
low enough that its weights fall back to the balanced profile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from contracts.enums import Intent

STRONG: Final = 0.95
"""A rule at this confidence settles the intent without asking the zero-shot model."""

DEFAULT_CONFIDENCE: Final = 0.3


@dataclass(frozen=True)
class RuleMatch:
    intent: Intent
    confidence: float
    rule: str | None
    """The cue that fired; None when nothing did and the intent is the default."""


_FUNCTIONS = r"(?:sqrt|log|exp|sin|cos|abs|round|min|max)"
_OPERAND = rf"(?:\d+(?:[.,]\d+)*%?|\(|\)|{_FUNCTIONS}\s*\(|pi\b)"
_OPERATOR = r"(?:[-+*/^×÷%]|\*\*|\bx\b|\b(?:plus|minus|times|divided by|multiplied by)\b)"
_ARITHMETIC = re.compile(
    rf"\d+(?:\.\d+)?\s*{_OPERATOR}\s*{_OPERAND}"  # 17 * 23, 12 x 7, 3 plus 4
    rf"|{_FUNCTIONS}\s*\(\s*[\d.]+"  # sqrt(16)
    r"|\d+(?:\.\d+)?\s*%\s*of\s+\d",  # 15% of 200
    re.IGNORECASE,
)
_RANGE = re.compile(r"\b\d+[-–]\d+\b")  # "2019-2020", "pages 10-20": ranges, not subtractions
_BARE_ARITHMETIC = re.compile(
    r"^(?:what(?:'s| is)|how much is|calculate|compute)?\s*[-+*/^×÷%().\d\s]+[?=.]*$", re.IGNORECASE
)
_MATH_WORDS = re.compile(
    r"\b(?:square root|cube root|percent|to the power|squared|cubed|plus|minus|times"
    r"|divided by|multiplied by|sum of|product of)\b",
    re.IGNORECASE,
)
_CALC_VERB = re.compile(r"\b(?:calculate|compute|evaluate|solve)\b", re.IGNORECASE)
_QUANTITY_ASK = re.compile(
    r"\b(?:convert|how many|how much|percent(?:age)?"
    r"|(?:days?|weeks?|months?|years?|hours?|minutes?) (?:between|until|since|from))\b|%",
    re.IGNORECASE,
)
_NUMBER = re.compile(
    r"\b\d{4}-\d{1,2}-\d{1,2}\b"  # a date
    r"|(?<![\w.-])\d+(?:[.,]\d+)*(?![\w-])"  # a number alone: not "b12", "ps5", "covid-19"
    r"|\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty"
    r"|forty|fifty|hundred|thousand|million|billion|half|quarter|dozen)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class _Cue:
    intent: Intent
    confidence: float
    pattern: re.Pattern[str]


def _cue(intent: Intent, confidence: float, *alternatives: str) -> _Cue:
    pattern = re.compile(r"\b(?:" + "|".join(alternatives) + r")\b", re.IGNORECASE)
    return _Cue(intent, confidence, pattern)


_CUES: Final = [
    _cue(
        Intent.SUMMARY,
        0.75,
        r"summari[sz]e|summary|overview|tl;?dr",
        r"main (?:themes?|topics?|ideas?|points?)",
        r"key (?:themes?|topics?|points?|ideas?|takeaways?)",
        r"what is .{0,40}\babout",
    ),
    _cue(
        Intent.COMPARISON,
        0.75,
        r"compare[ds]?|comparison|vs\.?|versus|similarities|pros and cons",
        r"differences? between|differs? from|better than|worse than",
    ),
    _cue(
        Intent.PROCEDURAL,
        0.7,
        r"how (?:do|can|should|would) (?:i|we|you|one)|how to",
        r"steps? (?:to|for)|step[- ]by[- ]step|guide to|instructions?",
        r"set ?up|install|configure",
    ),
    _cue(
        Intent.RECOMMENDATION,
        0.7,
        r"recommend\w*|suggest\w*|best|advice|advise",
        r"should (?:i|we)|which (?:one|is better)",
    ),
    _cue(
        Intent.NAVIGATION,
        0.65,
        r"find|where (?:is|are|can i find)|locate|show me|link to",
        r"which (?:document|page|section|chapter|file)",
        r"documents?|pages?|sections?|chapters?",
    ),
]


def _looks_like_arithmetic(query: str) -> bool:
    if _BARE_ARITHMETIC.match(query.strip()) and re.search(r"\d\s*[-+*/^×÷%]", query):
        return True  # nothing but arithmetic: even "10-3" is a subtraction
    return bool(_ARITHMETIC.search(_RANGE.sub(" ", query)))


def has_calculation_cue(query: str) -> bool:
    """Whether the query could be a calculation at all: arithmetic, a math or calculation
    word, a conversion or quantity question ("how many", "convert", "%"), or two numbers to
    work with. A model's `tool` without one is a misreading of a question's phrasing ("What
    is the capital of France?" is shaped like "What is 15% of 200?"), and `tool` sends the
    request to the calculator before any retrieval. One number is not a cue: it names things
    more often than it asks for arithmetic ("windows 10", "vitamin b12", "2019 tax brackets")."""
    return bool(
        _looks_like_arithmetic(query)
        or _CALC_VERB.search(query)
        or _MATH_WORDS.search(query)
        or _QUANTITY_ASK.search(query)
        or len(_NUMBER.findall(query)) >= 2
    )


def match_rules(query: str) -> RuleMatch:
    """The first cue that fires, strongest kind first; `factual` at low confidence if none."""
    if _looks_like_arithmetic(query):
        return RuleMatch(Intent.TOOL, STRONG, "arithmetic")
    if _CALC_VERB.search(query):
        has_numbers = bool(re.search(r"\d", query))
        return RuleMatch(Intent.TOOL, 0.8 if has_numbers else 0.6, "calculate")
    if _MATH_WORDS.search(query) and re.search(r"\d", query):
        return RuleMatch(Intent.TOOL, 0.85, "math words")
    for cue in _CUES:
        if cue.pattern.search(query):
            return RuleMatch(cue.intent, cue.confidence, cue.intent.value)
    return RuleMatch(Intent.FACTUAL, DEFAULT_CONFIDENCE, None)
