"""A research question's sub-questions, without a model: its facets, its entities, and the
bridge entities its first retrieval found.

- **Facets**: a question that coordinates what it asks about ("the causes and consequences of
  X", "Compare A and B", "A or B: which ...") asks each part on its own.
- **Entities**: a question naming two or more things (names, symbols) asks about each of them
  with the rest of the question.
- **Bridges**: a question that names something by its relation to something else ("the
  founder of the company that made X") is followed through the entities the best passages
  name and the question lacks (`engines.critic.decompose`).

The question itself always comes first, so the report answers it directly before it goes
into its parts. Sub-questions are distinct (case and punctuation aside) and at most
`limit`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Final

from contracts.models import RetrievedChunk
from contracts.queries import MAX_QUERY_CHARS
from engines.critic.decompose import sub_queries
from infra.retrieval.entities import extract_entities
from infra.retrieval.lexical import STOP_WORDS

_COMPARE: Final = re.compile(
    r"^\s*(?:compare|contrast)\s+(?P<a>.+?)\s+(?:and|with|to|versus|vs\.?)\s+(?P<b>.+?)"
    r"(?:\s+(?P<rest>(?:in terms of|regarding|on|for|by)\s+.+?))?\s*[?.!]*\s*$",
    re.IGNORECASE,
)
_HEADS: Final = re.compile(
    r"^(?P<lead>.*?\b(?:the\s+)?)(?P<a>[a-z]+(?:\s+[a-z]+)?)\s+(?:and|or)\s+(?P<b>[a-z]+(?:\s+[a-z]+)?)"
    r"\s+(?P<link>of|for|in|on|behind)\s+(?P<rest>.+)$",
)  # lower-case heads only ("causes and consequences"): names are `entity_questions`' work
_ROMAN: Final = re.compile(r"[IVXLC]+")
_VERSUS: Final = re.compile(r"\s+(?:vs\.?|versus)\s+", re.IGNORECASE)


def facets(question: str) -> list[str]:
    """The question's coordinated parts, each asked on its own; [] when it has none."""
    text = " ".join(question.split())
    compare = _COMPARE.match(text)
    if compare:
        rest = f" {compare.group('rest')}" if compare.group("rest") else ""
        return [f"{compare.group('a')}{rest}", f"{compare.group('b')}{rest}"]
    heads = _HEADS.match(text.rstrip("?.! "))
    if heads and not _is_stop(heads.group("a")) and not _is_stop(heads.group("b")):
        lead, link, rest = heads.group("lead"), heads.group("link"), heads.group("rest")
        return [f"{lead}{heads.group(part)} {link} {rest}?".strip() for part in ("a", "b")]
    parts = _VERSUS.split(text.rstrip("?.! "))
    if len(parts) == 2 and all(part.strip() for part in parts):
        return [part.strip() for part in parts]
    return []


def _is_stop(words: str) -> bool:
    return all(word.lower() in STOP_WORDS for word in words.split())


def entity_questions(question: str) -> list[str]:
    """One question per named thing when the question names two or more: the question asked
    of each ("Who built A and B?" -> "Who built A?", "Who built B?"), else each name with the
    rest of the question."""
    found = [
        e.name
        for e in extract_entities(question, limit=10)
        if e.kind == "proper" or (e.kind == "acronym" and not _ROMAN.fullmatch(e.name))
    ]
    names = [n for n in found if not any(n != other and n in other for other in found)]
    if len(names) < 2:
        return []
    ordered = sorted(names, key=lambda n: question.find(n))
    for first, second in itertools.pairwise(ordered):
        span = re.search(
            rf"(?:the\s+)?{re.escape(first)}\s*(?:,|and|or|&)\s*(?:the\s+)?{re.escape(second)}",
            question,
        )
        if span:
            article = lambda n: f"the {n}" if f"the {n}" in question else n  # noqa: E731
            return [
                question[: span.start()] + article(name) + question[span.end() :]
                for name in (first, second)
            ]
    rest = question
    for name in names:
        rest = rest.replace(name, " ")
    words = [w for w in re.findall(r"[\w'-]+", rest) if w.lower() not in STOP_WORDS]
    topic = " ".join(words[:8])
    return [f"{name} {topic}".strip() for name in ordered]


def plan(question: str, contexts: Sequence[RetrievedChunk], limit: int) -> list[str]:
    """The sub-questions of a research request, the question itself first."""
    candidates = [
        question,
        *facets(question),
        *entity_questions(question),
        *sub_queries(question, contexts),
    ]
    out: list[str] = []
    seen: set[str] = set()
    for candidate in candidates:
        text = " ".join(candidate.split())[:MAX_QUERY_CHARS]
        key = re.sub(r"^(?:the|a|an) ", "", re.sub(r"[^\w]+", " ", text.lower()).strip())
        if key and key not in seen:
            seen.add(key)
            out.append(text)
    return out[:limit]


def has_parts(question: str) -> bool:
    """Whether a sub-question has parts of its own to research (facets, several names)."""
    return bool(facets(question) or entity_questions(question))
