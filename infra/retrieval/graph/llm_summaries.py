"""Community summaries written by the LLM (when `RAGBUS_LLM_BASE_URL` is set).

The model gets a community's strongest entity names and a few sentences from its most central
chunks, and writes two or three sentences saying what the community is about: text that global
search then finds by meaning through its embedding. A failure of any kind is the caller's to
catch (`summarise_all` keeps the extractive summary).

Summaries are cached by what the model was shown, so recomputing communities after a job asks
the model only about communities that changed.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Final

from infra.llm import LLMClient
from infra.llm_tasks import ask
from infra.retrieval.graph.model import CommunityBrief

CACHE_SIZE: Final = 4_096
MAX_SENTENCE_CHARS: Final = 400

SYSTEM_PROMPT: Final = """\
You summarise clusters of a knowledge graph for a search index.
You are given the main entities of one cluster and sentences from the passages that mention \
them. Write 2 to 3 plain sentences saying what the cluster is about and how its entities \
relate. Use only what the sentences say; name the key entities; no lists, no preamble, \
no citations."""


def user_prompt(brief: CommunityBrief) -> str:
    sentences = "\n".join(f"- {s[:MAX_SENTENCE_CHARS]}" for s in brief.sentences) or "- (none)"
    return f"Entities: {', '.join(brief.entities)}\n\nSentences:\n{sentences}\n\nSummary:"


class SummaryEmpty(Exception):
    """The model answered nothing usable."""


class LLMCommunitySummariser:
    """A `Summarise` callable: `await summariser(brief)` → the model's summary (or raises)."""

    def __init__(self, client: LLMClient, cache_size: int = CACHE_SIZE) -> None:
        self.client = client
        self.cache_size = cache_size
        self._cache: OrderedDict[str, str] = OrderedDict()
        self.requests = 0

    @staticmethod
    def _cache_key(brief: CommunityBrief, model: str) -> str:
        shown = json.dumps([model, brief.entities, brief.sentences], ensure_ascii=False)
        return hashlib.sha256(shown.encode()).hexdigest()

    async def __call__(self, brief: CommunityBrief) -> str:
        key = self._cache_key(brief, self.client.model)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        self.requests += 1
        completion = await ask(self.client, SYSTEM_PROMPT, user_prompt(brief))
        text = " ".join(completion.content.split())
        for prefix in ("Summary:", "summary:"):
            text = text.removeprefix(prefix).strip()
        if not text:
            raise SummaryEmpty("the model returned an empty summary")
        self._cache[key] = text
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return text
