"""LLM entity extraction, used for ingestion when `RAGBUS_LLM_BASE_URL` is set (and
`RAGBUS_LLM_ENTITIES` is not switched off).

One request covers a batch of chunks (`BATCH_CHUNKS`, numbered passages in one prompt) to keep
ingestion affordable; the model answers
`{"chunks": [{"index": n, "entities": [{"name": ..., "kind": ...}]}]}`.

The answer is read defensively. Anything unusable falls back to the offline extractor
(`infra.retrieval.entities`) for the chunks it concerns, and is counted: a failed request or an
answer that is not JSON → the whole batch; a chunk missing from the answer → that chunk. An answer
cut short by the token limit is asked again as two halves. Names are keyed with the offline
extractor's own tokenizer and `normalize`, so "Breast Cancers" from the model and "breast
cancer" from a query (or from a document ingested offline) are one graph entity. Names not
found in their passage are dropped (the model's world knowledge is not a mention), and the
offline extractor's acronyms and symbols (BRCA1, IL-6, H2O), which models tend to skip, are
merged in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, get_args

from infra.llm import LLMClient, describe
from infra.llm_tasks import ask, parse_json_object
from infra.logging import get_logger
from infra.retrieval.entities import (
    MAX_ENTITIES,
    Entity,
    EntityKind,
    entity_from_name,
    extract_entities,
    normalize,
    tokenize,
)

log = get_logger(__name__)

BATCH_CHUNKS: Final = 6
"""Chunks per request: ~5k characters of passages, and an answer that fits 1024 tokens."""
MAX_PASSAGE_CHARS: Final = 2_000
ENTITIES_PER_CHUNK: Final = 15
"""Asked of the model; the merged list is cut at `MAX_ENTITIES` like the offline one."""
CONCURRENCY: Final = 2
"""Requests in flight for one document."""

_KINDS: Final = frozenset(get_args(EntityKind))
_KIND_RANK: Final = {"acronym": 0, "proper": 1, "term": 2}

SYSTEM_PROMPT: Final = f"""\
You do entity extraction for a knowledge graph built from technical and scientific text.
For every numbered passage, list the entities it mentions: people, organisations, places, \
products, genes, proteins, chemicals, diseases, methods, standards, software, and the \
specific technical concepts the passage is about. Skip generic words ("study", "patients", \
"results").
- Copy each name as written in the passage; no explanations, no entities the passage does \
not mention.
- kind is "acronym" (abbreviations and symbols: BRCA1, IL-6, H2O), "proper" (named things) \
or "term" (technical concepts).
- At most {ENTITIES_PER_CHUNK} entities per passage, the most important first.
Answer with JSON only, one entry per passage, in this shape:
{{"chunks": [{{"index": 1, "entities": [{{"name": "...", "kind": "proper"}}]}}]}}"""


def user_prompt(texts: Sequence[str]) -> str:
    blocks = []
    for number, text in enumerate(texts, start=1):
        body = " ".join(text.split())[:MAX_PASSAGE_CHARS].replace("</passage", "< /passage")
        blocks.append(f'<passage index="{number}">\n{body}\n</passage>')
    return "\n\n".join(blocks) + f"\n\nReturn the entities of all {len(texts)} passages as JSON."


@dataclass
class Extraction:
    entities: list[list[Entity]]
    """One list per chunk, in the order given."""
    llm_chunks: int = 0
    """Chunks whose entities the model gave."""
    fallback_chunks: int = 0
    """Chunks extracted offline because the model failed them."""
    requests: int = 0
    dropped: int = 0
    """Names the model gave that were unusable or not in their passage."""
    reasons: list[str] = field(default_factory=list)


class AnswerUnusable(Exception):
    """The reply held no usable JSON; `truncated` when the token limit cut it."""

    def __init__(self, message: str, *, truncated: bool = False) -> None:
        super().__init__(message)
        self.truncated = truncated


def _grounded(entity: Entity, passage_norms: set[str]) -> bool:
    """Every word of the name occurs in the passage (compared as single-word norms)."""
    return all(normalize([word]) in passage_norms for word in tokenize(entity.name))


def _entities_of(raw: Any, text: str) -> tuple[list[Entity], int]:
    """The usable entities of one chunk's answer, in the model's order, and how many were
    dropped."""
    passage_norms = {normalize([word]) for word in tokenize(text)}
    found: dict[str, Entity] = {}
    dropped = 0
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, str):
            name, kind = item, None
        elif isinstance(item, dict) and isinstance(item.get("name"), str):
            name, kind = item["name"], item.get("kind")
        else:
            dropped += 1
            continue
        entity = entity_from_name(name, kind if kind in _KINDS else None)
        if entity is None or not _grounded(entity, passage_norms):
            dropped += 1
            continue
        known = found.get(entity.norm)
        if known is None or _KIND_RANK[entity.kind] < _KIND_RANK[known.kind]:
            found[entity.norm] = entity
    return list(found.values()), dropped


def merge(
    llm: Sequence[Entity], offline: Sequence[Entity], limit: int = MAX_ENTITIES
) -> list[Entity]:
    """The model's entities plus the offline acronyms/symbols it missed, most trusted kind
    first (as the offline extractor orders them), the model's order within a kind."""
    merged: dict[str, Entity] = {e.norm: e for e in llm}
    for entity in offline:
        if entity.kind == "acronym":
            known = merged.get(entity.norm)
            if known is None or known.kind != "acronym":
                merged[entity.norm] = entity
    ranked = sorted(merged.values(), key=lambda e: _KIND_RANK[e.kind])  # stable
    return ranked[:limit]


def parse_answer(content: str, texts: Sequence[str]) -> tuple[dict[int, list[Entity]], int]:
    """Entities per batch position (0-based) for the chunks the answer covers, and the number
    of names dropped. Raises `AnswerUnusable` when there is no `chunks` list at all."""
    data = parse_json_object(content)
    if data is None:
        raise AnswerUnusable("the model's answer is not JSON")
    items = data.get("chunks")
    if not isinstance(items, list):
        raise AnswerUnusable("the model's answer has no `chunks` list")
    covered: dict[int, list[Entity]] = {}
    dropped = 0
    for item in items:
        if not isinstance(item, dict):
            continue
        index = item.get("index")
        if isinstance(index, str) and index.strip().isdigit():
            index = int(index)
        if not isinstance(index, int) or isinstance(index, bool) or not 1 <= index <= len(texts):
            continue
        if index - 1 in covered:
            continue  # a repeated index: the first answer stands
        entities, lost = _entities_of(item.get("entities"), texts[index - 1])
        covered[index - 1] = entities
        dropped += lost
    return covered, dropped


class LLMEntityExtractor:
    """Entities for a document's chunks from the model, the offline extractor filling in."""

    def __init__(
        self,
        client: LLMClient,
        *,
        batch_chunks: int = BATCH_CHUNKS,
        concurrency: int = CONCURRENCY,
        limit: int = MAX_ENTITIES,
    ) -> None:
        self.client = client
        self.batch_chunks = max(1, batch_chunks)
        self.limit = limit
        self._concurrency = max(1, concurrency)

    async def extract(self, texts: Sequence[str]) -> Extraction:
        """Never raises for a model failure (only on cancellation): those chunks go offline."""
        offline = await asyncio.to_thread(lambda: [extract_entities(t) for t in texts])
        result = Extraction(entities=[[] for _ in texts])
        slots = asyncio.Semaphore(self._concurrency)
        starts = range(0, len(texts), self.batch_chunks)

        async def run(start: int) -> None:
            async with slots:
                await self._batch(list(texts), start, start + self.batch_chunks, offline, result)

        await asyncio.gather(*(run(start) for start in starts))
        return result

    async def _batch(
        self,
        texts: list[str],
        start: int,
        stop: int,
        offline: list[list[Entity]],
        result: Extraction,
    ) -> None:
        batch = texts[start:stop]
        covered: dict[int, list[Entity]] = {}
        result.requests += 1
        try:
            completion = await ask(self.client, SYSTEM_PROMPT, user_prompt(batch))
            truncated = completion.finish_reason == "length"
            try:
                covered, dropped = parse_answer(completion.content, batch)
            except AnswerUnusable as exc:
                raise AnswerUnusable(str(exc), truncated=truncated) from None
            result.dropped += dropped
        except asyncio.CancelledError:
            raise
        except AnswerUnusable as exc:
            if exc.truncated and len(batch) > 1:  # too long an answer: ask for halves
                middle = start + len(batch) // 2
                await self._batch(texts, start, middle, offline, result)
                await self._batch(texts, middle, stop, offline, result)
                return
            self._note(result, str(exc), len(batch))
        except Exception as exc:
            self._note(result, describe(exc), len(batch))
        missing = [i for i in range(len(batch)) if i not in covered]
        if covered and missing:
            self._note(result, "the model's answer left chunks out", len(missing))
        for i in range(len(batch)):
            position = start + i
            if i in covered:
                result.entities[position] = merge(covered[i], offline[position], self.limit)
                result.llm_chunks += 1
            else:
                result.entities[position] = offline[position]
                result.fallback_chunks += 1

    @staticmethod
    def _note(result: Extraction, reason: str, chunks: int) -> None:
        log.warning("llm_entities_fallback", reason=reason, chunks=chunks)
        if reason not in result.reasons:
            result.reasons.append(reason)
