"""Plans tool calls for a query that came without any: finds the arithmetic in it.

"what is 17 * 23 + 4?", "calculate 2^10", "15% of 200", "sqrt(16)", "12 x 7",
"3 plus 4 times 2" all become one `calculator` call; a query without arithmetic
plans nothing.
"""

from __future__ import annotations

import hashlib
import re

from contracts.models import ToolCall
from workers.tool.calculator import CONSTANTS, FUNCTIONS

_WORD_OPERATORS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(pattern, re.IGNORECASE), symbol)
    for pattern, symbol in [
        (r"\bto the power of\b", "^"),
        (r"\bsquare root of\s+(\d+(?:\.\d+)?)", r"sqrt(\1)"),
        (r"\bpercent\b", "%"),
        (r"\b(?:multiplied by|times)\b", "*"),
        (r"\bdivided by\b", "/"),
        (r"\bplus\b", "+"),
        (r"\bminus\b", "-"),
        (r"\bmodulo\b|\bmod\b", "%"),
        (r"(?<=\d)\s*squared\b", "^ 2"),
        (r"(?<=\d)\s*cubed\b", "^ 3"),
    ]
]
_NUMBER = r"\d+(?:[.,]\d+)*"
_PERCENT_OF = re.compile(rf"({_NUMBER})\s*%\s*of\s+", re.IGNORECASE)
_PERCENT = re.compile(rf"({_NUMBER})\s*%(?!\s*[\d(])")
_TIMES_X = re.compile(r"(?<=\d)\s*[xX]\s*(?=\d)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_YEAR_RANGE = re.compile(r"^\d{4}[-–]\d{4}$")  # "2019-2020" is a period, not a subtraction

_BINARY_OPERATION = re.compile(r"[\w)]\s*[-+*/^%×÷]+\s*[-\w(]")  # "-19" alone is no operation
_FUNCTION_CALL = re.compile(r"[a-z]\s*\(", re.IGNORECASE)
_NAMES = "|".join(sorted([*FUNCTIONS, *CONSTANTS], key=len, reverse=True))
_EXPRESSION = re.compile(rf"(?:\b(?:{_NAMES})\b|\d+(?:\.\d+)?|[-+*/^%×÷().,]|\s)+", re.IGNORECASE)


def _normalise(query: str) -> str:
    text = query
    for pattern, symbol in _WORD_OPERATORS:
        text = pattern.sub(f" {symbol} ", text)  # spaces keep "3plus4" from fusing
    text = _THOUSANDS.sub("", text)
    text = _PERCENT_OF.sub(r"\1 / 100 * ", text)
    text = _PERCENT.sub(r"(\1 / 100)", text)
    return _TIMES_X.sub(" * ", text)


def _tidy(candidate: str) -> str:
    """Strip what a sentence leaves around the arithmetic: punctuation, dangling operators."""
    text = re.sub(r"\s+", " ", candidate).strip(" .,")
    while text and text[-1] in "+-*/^%×÷(,":
        text = text[:-1].rstrip()
    while text and text[0] in "*/^%×÷),":
        text = text[1:].lstrip()
    while text.count("(") > text.count(")") and text.startswith("("):
        text = text[1:].lstrip()
    return text


def extract_expression(query: str) -> str | None:
    """The arithmetic in a query, or None when there is none worth computing."""
    best: str | None = None
    for match in _EXPRESSION.finditer(_normalise(query)):
        candidate = _tidy(match.group())
        if not re.search(r"\d", candidate):
            continue
        has_operation = _BINARY_OPERATION.search(candidate) or _FUNCTION_CALL.search(candidate)
        if not has_operation or _YEAR_RANGE.match(candidate):
            continue
        if best is None or len(candidate) > len(best):
            best = candidate
    return best


def plan_calls(query: str) -> list[ToolCall]:
    expression = extract_expression(query)
    if expression is None:
        return []
    call_id = "plan-" + hashlib.sha1(expression.encode()).hexdigest()[:10]
    return [ToolCall(id=call_id, name="calculator", arguments={"expression": expression})]
