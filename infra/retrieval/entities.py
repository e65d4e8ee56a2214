"""Offline entity extraction for the graph channels: no model, only patterns and counts.

Three kinds of entity, in decreasing order of trust:
- `acronym`: symbols such as BRCA1, COVID-19, IL-6, H2O, mRNA;
- `proper`: capitalised spans that do not merely start a sentence ("Mayo Clinic");
- `term`: content words and bigrams a text repeats (a passage about "statin use" says it twice).

Every entity has a `norm`, the key both graph backends match on: lower-case, punctuation
stripped, last word stemmed, so "Breast Cancers" and "breast cancer" are one entity.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from infra.retrieval.lexical import STOP_WORDS, stem
from infra.retrieval.sentences import split_sentences

EntityKind = Literal["acronym", "proper", "term"]

MAX_ENTITIES = 30
_KIND_RANK: dict[str, int] = {"acronym": 0, "proper": 1, "term": 2}
_CONNECTORS = frozenset({"of", "for", "de", "la", "du", "von", "van", "and", "the"})
_TOKEN = re.compile(r"[^\W_]+(?:[-'’][^\W_]+)*", re.UNICODE)


@dataclass(frozen=True)
class Entity:
    name: str
    norm: str
    kind: EntityKind


def normalize(words: Sequence[str]) -> str:
    """The matching key of a span: lower-case, inner punctuation dropped, last word stemmed."""
    cleaned = [re.sub(r"[^\w]", "", word.lower()) for word in words]
    cleaned = [word for word in cleaned if word]
    if not cleaned:
        return ""
    cleaned[-1] = stem(cleaned[-1])
    return " ".join(cleaned)


def title_norms(title: str) -> list[str]:
    """The entity norms a document's title names it by: the whole title, and its head before a
    disambiguation ("Folk Songs (Berio)") or a qualifier ("Johnnycake, West Virginia")."""
    heads = [title, re.split(r"\s*[(\[]", title, maxsplit=1)[0], title.split(",", 1)[0]]
    norms: list[str] = []
    for head in heads:
        norm = normalize(head.split())
        if norm and norm not in norms:
            norms.append(norm)
    return norms


def _is_acronym(token: str) -> bool:
    letters = [ch for ch in token if ch.isalpha()]
    upper = sum(ch.isupper() for ch in letters)
    lower = len(letters) - upper
    digits = sum(ch.isdigit() for ch in token)
    if len(token) < 2 or not letters or upper == 0:
        return False
    return (upper >= 2 or digits >= 1) and lower <= upper


def _is_capitalised(token: str) -> bool:
    return token[:1].isupper() and not _is_acronym(token)


def _is_content(word: str) -> bool:
    return len(word) >= 3 and word.lower() not in STOP_WORDS and not word.isdigit()


def _proper_spans(tokens: list[str]) -> list[list[str]]:
    """Runs of capitalised words, joined by connectors ("Bank of England"), not sentence-initial
    unless they are longer than one word ("Mayo Clinic reported ..." still yields the clinic)."""
    spans: list[list[str]] = []
    i = 0
    while i < len(tokens):
        if not _is_capitalised(tokens[i]):
            i += 1
            continue
        span = [tokens[i]]
        j = i + 1
        while j < len(tokens):
            if _is_capitalised(tokens[j]):
                span.append(tokens[j])
                j += 1
            elif (
                tokens[j].lower() in _CONNECTORS
                and j + 1 < len(tokens)
                and _is_capitalised(tokens[j + 1])
            ):
                span.extend(tokens[j : j + 2])
                j += 2
            else:
                break
        while span and not _is_content(span[0]):
            span = span[1:]  # "The Mayo Clinic" -> "Mayo Clinic", "Dr Smith" -> "Smith"
        while span and span[-1].lower() in STOP_WORDS:
            span = span[:-1]
        sentence_initial = i == 0
        if span and (len(span) > 1 or not sentence_initial):
            spans.append(span)
        i = j
    return spans


def _words(sentence: str) -> list[str]:
    return _TOKEN.findall(sentence)


def tokenize(text: str) -> list[str]:
    """The word tokens the extractor sees (inner hyphens and apostrophes kept: "IL-6")."""
    return _words(text)


def infer_kind(words: Sequence[str]) -> EntityKind:
    """The kind a span's surface form suggests: one symbol-like token is an acronym, a span
    starting with a capital a proper name, anything else a term."""
    if len(words) == 1 and _is_acronym(words[0]):
        return "acronym"
    return "proper" if words and words[0][:1].isupper() else "term"


def entity_from_name(name: str, kind: EntityKind | None = None) -> Entity | None:
    """An entity named by someone else (an LLM), keyed exactly like the extractor's own —
    same tokens, same `normalize` — so both kinds of extraction meet in the graph. None for
    a name with no content (punctuation, a lone stop word)."""
    words = _words(name)
    if not words or all(word.lower() in STOP_WORDS for word in words):
        return None
    norm = normalize(words)
    if len(norm) < 2:
        return None
    return Entity(name=" ".join(words), norm=norm, kind=kind or infer_kind(words))


def extract_all(texts: list[str]) -> list[list[Entity]]:
    """`extract_entities` of each text: one call a background process can run for a document."""
    return [extract_entities(text) for text in texts]


def extract_entities(text: str, limit: int = MAX_ENTITIES) -> list[Entity]:
    """Entities of a passage, deduplicated by norm, the most trusted and frequent first."""
    found: dict[str, Entity] = {}
    counts: Counter[str] = Counter()

    def add(words: list[str], kind: EntityKind) -> None:
        norm = normalize(words)
        if not norm:
            return
        counts[norm] += 1
        known = found.get(norm)
        if known is None or _KIND_RANK[kind] < _KIND_RANK[known.kind]:
            found[norm] = Entity(name=" ".join(words), norm=norm, kind=kind)

    term_counts: Counter[str] = Counter()
    term_names: dict[str, list[str]] = {}
    for sentence in split_sentences(text):
        tokens = _words(sentence)
        for token in tokens:
            if _is_acronym(token):
                add([token], "acronym")
        for span in _proper_spans(tokens):
            add(span, "proper")
        previous: str | None = None
        for token in tokens:
            if not _is_content(token) or _is_acronym(token):
                previous = None
                continue
            for words in ([token], [previous, token] if previous else None):
                if words:
                    norm = normalize(words)
                    term_counts[norm] += 1
                    term_names.setdefault(norm, [w.lower() for w in words])
            previous = token
    for norm, count in term_counts.items():
        if count >= 2 and norm not in found:
            found[norm] = Entity(name=" ".join(term_names[norm]), norm=norm, kind="term")
            counts[norm] = count
    ranked = sorted(found.values(), key=lambda e: (_KIND_RANK[e.kind], -counts[e.norm], e.norm))
    return ranked[:limit]


def query_entities(query: str) -> list[str]:
    """Norms to look up for a query: its entities plus every content word and adjacent pair,
    so a short or lower-case query ("brca1 risk") still meets the graph."""
    norms: list[str] = [entity.norm for entity in extract_entities(query, limit=50)]
    for sentence in split_sentences(query):
        tokens = [token for token in _words(sentence) if _is_content(token) or _is_acronym(token)]
        norms.extend(normalize([token]) for token in tokens)
        norms.extend(normalize(pair) for pair in itertools.pairwise(tokens))
    return list(dict.fromkeys(norm for norm in norms if norm))
