"""Bridge terms for a retry: what the first attempt's best passages name that the question
does not.

A multi-hop question ("the first president of the association that published X") names
only its first hop; the passage that answers it names the bridge ("the American
Psychological Association"), and the second hop is found by searching for that bridge.
This is pseudo-relevance feedback restricted to entities, which keeps the expansion short
and on topic.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Final

from contracts.models import RetrievedChunk
from infra.entities import extract_entities, query_entities

FROM_CONTEXTS: Final = 3
MAX_TERMS: Final = 2
_KIND_WEIGHT: Final = {"proper": 2.0, "acronym": 1.5, "term": 1.0}


def bridge_terms(query: str, contexts: Sequence[RetrievedChunk]) -> list[str]:
    """Up to `MAX_TERMS` entity names from the top contexts that the query lacks, best first."""
    asked = set(query_entities(query))
    asked_words = {word for norm in asked for word in norm.split()}
    weights: defaultdict[str, float] = defaultdict(float)
    names: dict[str, str] = {}
    for position, chunk in enumerate(contexts[:FROM_CONTEXTS]):
        for entity in extract_entities(chunk.text):
            words = entity.norm.split()
            if entity.norm in asked or 2 * sum(w in asked_words for w in words) > len(words):
                continue  # mostly the question's own topic, not a bridge away from it
            weights[entity.norm] += _KIND_WEIGHT.get(entity.kind, 1.0) / (1 + position)
            names.setdefault(entity.norm, entity.name)
    best = sorted(weights, key=lambda norm: (-weights[norm], norm))[:MAX_TERMS]
    return [names[norm] for norm in best]


def expanded_query(query: str, contexts: Sequence[RetrievedChunk]) -> str | None:
    """The question followed by its bridge terms, or None when there is nothing to add."""
    terms = bridge_terms(query, contexts)
    return f"{query.rstrip()} {' '.join(terms)}" if terms else None
