"""One question through the same-work peer (`bench.same_work`): `Worker.serve`, on one
thread's event loop, with ragbus's engine functions, and what it reports (`Served`).

Per query, one attempt (a critic's `retry` verdict is counted, not followed), as the workers
do it for `ragbus bench`'s requests (no session, `answer` mode, default `top_k`):
- classify: `IntentClassifier.classify` (rules → the trained SetFit head of
  `<data>/intent-model` → zero-shot), which encodes the query once (`engines.classify`);
- tool (a `tool` intent only, as the saga routes it): the planned calculator calls,
  `workers.tool.router.run_tools`, then generation and the critic without search;
- search: each document channel the intent weighs above 0 (the saga skips the others), by
  the search engine's `search_channel` (the channel functions of `engines.search.channels`)
  over the copied stores, ranked and cut as the search worker has them;
- fuse: the fuse engine's `fuse` (convex or RRF, `RAGBUS_FUSION`) with the intent's weights,
  the graph bridge, hydration of the fused passages from the vector store (text, stored vector
  and sentence vectors) and the cross-encoder when one is configured, as
  `engines.fuse.pipeline.fuse_rankings` does it for the fuse worker (less the claim store);
- generate: `engines.generate.answer.answer_for` (extractive: stored sentence vectors, the
  query vector from classify);
- critic: `engines.critic.judge.critique`.

The classify, search, fuse, generate and critic stages are the engines the workers compose
(`engines`); only the tool stage is a worker's own code (`workers.tool.router`).

Each thread has its own `Worker`: its own event loop and its own `IntentClassifier` (its
zero-shot prototypes sit behind an asyncio lock, which belongs to one loop); the trained intent
model is loaded once and shared, as in ragbus's process.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from contracts.commands import CriticCommand, GenerateCommand, SearchCommand, ToolCommand
from contracts.enums import Channel, Intent
from contracts.envelope import new_request_id
from contracts.models import RetrievedChunk, ToolOutcome
from engines.classify.classifier import Classification, IntentClassifier
from engines.classify.intent_model import ModelSlot
from engines.critic.judge import critique
from engines.fuse.bridge import bridge
from engines.fuse.rerank import rerank
from engines.fuse.rrf import channel_counts, effective_weights, fuse
from engines.generate.answer import answer_for
from engines.search.channel_search import CHANNEL_FUNCTIONS, search_channel
from infra.retrieval.scope import document_scope
from workers.tool.registry import calling_filter
from workers.tool.router import run_tools

if TYPE_CHECKING:
    from bench.same_work_engines import Engines
    from infra.runtime.resources import Resources
    from infra.settings import Settings
    from workers.tool.registry import ToolRegistry

STAGES = ("classify", "tool", "search", "fuse", "generate", "critic")
Rankings = dict[Channel, list[RetrievedChunk]]


@dataclass(frozen=True)
class Served:
    """One query's answer as the peer made it, and the milliseconds of each stage."""

    stages_ms: dict[str, float]
    intent: str
    method: str
    answer: str
    citations: int
    contexts: int
    verdict: str
    encoded: int
    """Texts generation had to encode (0: the stored sentence vectors served, as in ragbus)."""


class Peer(Protocol):
    """What a worker reads of its peer (`bench.same_work.SameWorkPeer`): the engines over the
    copied stores, the settings, the tools, the namespace and how many chunks to keep."""

    settings: Settings
    engines: Engines
    tools: ToolRegistry
    namespace: str
    top_k: int
    channel_top_k: int
    filter: dict[str, Any] | None


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000


class Worker:
    """One thread's event loop and classifier (the engines and stores are shared)."""

    def __init__(self, peer: Peer, models: ModelSlot) -> None:
        self.peer = peer
        self.loop = asyncio.new_event_loop()
        self.classifier = IntentClassifier(peer.engines.encoder, models.directory)
        self.classifier._models = models  # one trained model per process, as in ragbus
        self.request_id = new_request_id()

    async def serve(self, query: str) -> Served:
        peer, settings = self.peer, self.peer.settings
        resources = cast("Resources", peer.engines)
        stages: dict[str, float] = {}
        started = time.perf_counter()
        found = await self.classifier.classify(query, None)
        stages["classify"] = _ms(started)
        tool_results: list[ToolOutcome] = []
        contexts: list[RetrievedChunk] = []
        if found.intent is Intent.TOOL:  # the saga sends it to the tool worker, not search
            started = time.perf_counter()
            cmd = ToolCommand(request_id=self.request_id, query=query, calls=[], filter=peer.filter)
            narrowed = calling_filter.set(peer.filter)  # as the tool worker sets it
            try:
                tool_results = await run_tools(peer.tools, cmd)
            finally:
                calling_filter.reset(narrowed)
            stages["tool"] = _ms(started)
        else:
            started = time.perf_counter()
            results = await self.search(query, found)
            stages["search"] = _ms(started)
            started = time.perf_counter()
            contexts = await self.fuse(query, found, results)
            stages["fuse"] = _ms(started)
        started = time.perf_counter()
        generate = GenerateCommand(
            request_id=self.request_id,
            query=query,
            intent=found.intent,
            contexts=contexts,
            tool_results=tool_results,
            tool_rounds_left=max(0, settings.max_tool_calls - (1 if tool_results else 0)),
            query_vectors={query: found.query_vector} if found.query_vector else {},
        )
        answer = await answer_for(generate, resources)
        stages["generate"] = _ms(started)
        started = time.perf_counter()
        critic = CriticCommand(
            request_id=self.request_id,
            query=query,
            intent=found.intent,
            answer=answer.text,
            citations=answer.citations,
            contexts=contexts,
            tool_results=tool_results,
            attempts_left=max(0, settings.max_attempts - 1),
            query_vector=found.query_vector,
        )
        verdict, _ = await critique(critic, resources, {})
        stages["critic"] = _ms(started)
        return Served(
            stages,
            found.intent.value,
            found.method,
            answer.text,
            len(answer.citations),
            len(contexts),
            verdict.verdict,
            answer.encoded,
        )

    async def search(self, query: str, found: Classification) -> Rankings:
        """The channels the intent weighs above 0, one after another (ragbus's search worker
        runs them side by side on one event loop: the same work)."""
        resources = cast("Resources", self.peer.engines)
        results: Rankings = {}
        for channel in CHANNEL_FUNCTIONS:
            if found.weights.get(channel, 0.0) <= 0.0:
                continue
            cmd = SearchCommand(
                request_id=self.request_id,
                channel=channel,
                query=query,
                namespaces=[self.peer.namespace],
                filter=self.peer.filter,
                top_k=self.peer.channel_top_k,
                query_vector=found.query_vector if channel.reads_query_vector else None,
            )
            results[channel] = (await search_channel(resources, cmd, channel)).chunks
        return results

    async def fuse(
        self, query: str, found: Classification, results: Rankings
    ) -> list[RetrievedChunk]:
        """`engines.fuse.pipeline.fuse_rankings` for a first attempt: fusion, bridge,
        hydration, rerank."""
        peer, settings = self.peer, self.peer.settings
        engines, top_k = peer.engines, peer.top_k
        effective_weights(found.weights, results)  # the fusion phase reports them
        reranker = engines.cross_encoder
        depth = max(top_k, settings.rerank_top_n) if reranker is not None else top_k
        chunks = fuse(results, found.weights, method=settings.fusion, k=settings.rrf_k, top_k=depth)
        if settings.graph_bridge and chunks:
            scope = await document_scope(engines.store, [peer.namespace], peer.filter)
            chunks, _ = await bridge(engines.graph_store, chunks, depth, scope)
        chunks = await engines.store.read(engines.store.hydrate, chunks)
        if reranker is not None:
            chunks, _ = await rerank(reranker, query, chunks, settings.rerank_top_n)
            chunks = chunks[:top_k]
        channel_counts(results)
        return chunks
