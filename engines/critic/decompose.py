"""Follow-up queries for a multi-hop question, built from what its first attempt found.

A multi-hop question ("the first president of the association that published X") names only
its first hop. The passage that answers that hop names the bridge ("the American Psychological
Association"), and the next hop is found by asking about the bridge the part of the question
that passage did not answer ("American Psychological Association first president"). So each
follow-up query is a bridge entity the best passages name and the question lacks, followed by
the question's words the best passage does not contain.

Only questions that name something by its relation to something else are decomposed ("the
author of X", "the country where Y was born", "X's founder"): that is what a hop looks like in
words. Topical queries ("Breast Cancer Cells Feed on Cholesterol") are not, even when their
passages name entities: on NFCorpus dev, following those up retried 20 of 150 queries for no
recall gained. The pattern matches 96 of MuSiQue train-100's questions and 1.5% of NFCorpus's
queries (5 of 324 dev, 32 of 2,590 train).

No language model: entities come from `infra.retrieval.entities`, words from the question
itself. The fuse step adds what the follow-ups find to the first attempt's list
(`engines.fuse.follow_up`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Final

from contracts.models import RetrievedChunk
from contracts.queries import MAX_QUERY_CHARS
from infra.retrieval.entities import extract_entities, query_entities
from infra.retrieval.lexical import analyze
from infra.retrieval.sentences import split_sentences

FROM_CONTEXTS: Final = 2
"""Passages whose named entities are bridge candidates, best first."""
MAX_FOLLOW_UPS: Final = 2
"""Each follow-up costs one search per channel. In an early measurement on MuSiQue train-100,
two follow-ups (bridges from the three best passages) found 22 of the 67 supporting documents
the first attempts missed in their top 10; three (from the two best) found 25, at half as
many searches again."""


_RELATION: Final = re.compile(
    r"\b[Tt]he\s+(?:[a-z]+\s+){0,2}?(?:of|by|from|in|on|at|for|containing|with|whose|that"
    r"|which|who|whom|where|when)\b"  # the author of, the city where, the first president of
    r"|\b[Tt]he\s+[a-z]+\s+[A-Z]"  # the country Signmark (is from)
    r"|\b[A-Z][\w.-]*(?:\s+[A-Z][\w.-]*)*'s\s+[a-z]"  # Hello Love's performer
    r"|\S\s+(?i:who|whom|whose|which|that|where)\s"  # the association which published
)


def names_by_relation(query: str) -> bool:
    """Whether the question names something by its relation to something else: a hop."""
    return _RELATION.search(query) is not None


def bridges(query: str, contexts: Sequence[RetrievedChunk]) -> list[str]:
    """Named entities of the best passages that are not mostly the question's own, best first.

    An entity counts more in a better passage and in a sentence sharing more of the question's
    words: the sentence that answers the first hop repeats the question and names the bridge.
    (Measured offline on MuSiQue train-100, every question followed up: recall at 8 0.709 with
    every entity of a passage counting the same, 0.726 with this.)
    """
    asked = set(query_entities(query))
    asked_words = {word for norm in asked for word in norm.split()}
    query_terms = set(analyze(query))
    weights: defaultdict[str, float] = defaultdict(float)
    names: dict[str, str] = {}
    for position, chunk in enumerate(contexts[:FROM_CONTEXTS]):
        for sentence in split_sentences(chunk.text):
            overlap = len(query_terms & set(analyze(sentence)))
            for entity in extract_entities(sentence):
                words = entity.norm.split()
                if entity.kind != "proper" or entity.norm in asked:
                    continue
                if 2 * sum(word in asked_words for word in words) > len(words):
                    continue  # the question's own topic, not a bridge away from it
                weights[entity.norm] += (1 + overlap) / (1 + position)
                names.setdefault(entity.norm, entity.name)
    best = sorted(weights, key=lambda norm: (-weights[norm], norm))[:MAX_FOLLOW_UPS]
    return [names[norm] for norm in best]


def unanswered(query: str, passage: RetrievedChunk) -> str:
    """The question's content words, as written, that the passage does not contain."""
    known = set(analyze(f"{passage.title} {passage.text}"))
    words = []
    for word in query.rstrip("?!. ").split():
        terms = set(analyze(word))
        if terms and not terms & known:
            words.append(word.strip(",;:'\"()"))
    return " ".join(words)


def sub_queries(query: str, contexts: Sequence[RetrievedChunk]) -> list[str]:
    """One follow-up query per bridge: the bridge and what the best passage left unanswered."""
    if not contexts or not names_by_relation(query):
        return []
    rest = unanswered(query, contexts[0])
    return [f"{bridge} {rest}".strip()[:MAX_QUERY_CHARS] for bridge in bridges(query, contexts)]
