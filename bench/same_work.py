"""The same-work peer: ragbus's own engines, in one process, loaded by T threads.

`ragbus bench` compares ragbus with two in-process peers. The retrieval-only one
(`bench.peer`) answers how ragbus compares with the simplest hybrid retriever; this one does
the work ragbus does for a question, with the same engine functions its workers call, minus
the design around them (NATS, the saga, Redis, the claim store, phase and token events, the
worker processes). ragbus's ratio to it is the design's own cost.

Per query, one attempt (a critic's `retry` verdict is counted, not followed), as the workers
do it for `ragbus bench`'s requests (no session, `answer` mode, default `top_k`):
- classify: `IntentClassifier.classify` (rules → the trained SetFit head of
  `<data>/intent-model` → zero-shot), which encodes the query once (`workers.classify`);
- tool (a `tool` intent only, as the saga routes it): the planned calculator calls,
  `workers.tool.router.run_tools`, then generation and the critic without search;
- search: each document channel the intent weighs above 0 (the saga skips the others), by
  the channel functions of `workers.search.channels` over the copied stores, ranked and cut
  as the search worker does (`workers.search.ranked`);
- fuse: `weighted_rrf` with the intent's weights, the graph bridge, hydration of the fused
  passages from the vector store (text, stored vector and sentence vectors) and the
  cross-encoder when one is configured, as `workers.fuse.router` does it;
- generate: `workers.generate.router.answer_for` (extractive: stored sentence vectors, the
  query vector from classify);
- critic: `workers.critic.router.critique`.

Stores: the namespace's Edge shard and the whole embedded graph (snapshot and journal) are
copied to a temporary directory, as `bench.peer` copies the shard: a running `ragbus up` owns
them. A copy whose communities are stale is recomputed once before the load, as the running
store does in the background after its first global search. BM25 has no data of its own
(Qdrant applies the IDF). Configurations whose engines cannot be opened beside a running
stack or would not do the same work are refused with the reason (`unsupported`): a Qdrant
or Neo4j server, BGE-M3, an LLM.

Threads and pools, chosen as follows:
- the encoder is loaded as ragbus's classify process loads it (`load_encoder`: ONNX Runtime
  with `RAGBUS_ENCODER_THREADS` or min(4, cores) intra-op threads, one inter-op thread, no
  spinning). Each of the T threads runs its own forward pass on the shared, thread-safe
  session (`InlineEncoder`); ragbus's coalescing batcher would merge concurrent queries into
  one pass instead (its futures belong to one event loop, so it cannot serve T loops);
- BLAS: left at the library's default, as ragbus leaves it (`blas_threads=None`; the
  retrieval peer pins one thread, `bench.closed_loop.BLAS_THREADS`). The matrices here are
  small (at most 240 sentences by 384): at 8 threads on the 35-chunk sample on 2 cores, two
  4 s runs each, one BLAS thread gave 19.2 and 20.2 q/s and the default 19.9 and 25.2, within
  the noise, so the pin that saved the retrieval peer changes nothing here;
- each thread has its own event loop and its own `IntentClassifier` (its zero-shot
  prototypes sit behind an asyncio lock, which belongs to one loop); the trained intent
  model is loaded once and shared, as in ragbus's process.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from bench.closed_loop import closed_loop
from bench.peer import compare, copy_shard, copy_tree, print_comparison
from contracts.commands import CriticCommand, GenerateCommand, SearchCommand, ToolCommand
from contracts.enums import Channel, Intent
from contracts.envelope import new_request_id
from contracts.models import RetrievedChunk, ToolOutcome
from infra.retrieval.encoder import Encoder, encoder_threads
from infra.retrieval.graph.embedded import EmbeddedGraphStore
from infra.retrieval.sparse import Bm25Sparse
from infra.retrieval.vectors.edge import EdgeVectorStore
from infra.settings import Settings
from workers.classify.classifier import Classification, IntentClassifier
from workers.classify.intent_model import ModelSlot
from workers.classify.model_meta import model_dir
from workers.critic.router import critique
from workers.fuse.bridge import bridge
from workers.fuse.rerank import rerank
from workers.fuse.rrf import channel_counts, channel_samples, effective_weights, weighted_rrf
from workers.generate.router import answer_for
from workers.search import CHANNEL_FUNCTIONS, channels, ranked
from workers.tool.router import default_registry, run_tools

if TYPE_CHECKING:
    from rich.console import Console

    from infra.retrieval.nli import NliModel
    from infra.retrieval.reranker import Reranker
    from infra.runtime.resources import Resources

STAGES = ("classify", "tool", "search", "fuse", "generate", "critic")
Rankings = dict[Channel, list[RetrievedChunk]]


def unsupported(settings: Settings) -> str | None:
    """Why the same-work peer cannot do ragbus's work under these settings, or None."""
    if settings.qdrant_url:
        return "RAGBUS_QDRANT_URL is set: the peer copies the embedded Edge store"
    if settings.neo4j_uri:
        return "RAGBUS_NEO4J_URI is set: the peer copies the embedded graph store"
    if settings.bge_m3_path is not None:
        return "RAGBUS_BGE_M3_PATH is set: the peer runs the dense encoder and BM25 only"
    if settings.llm_base_url:
        return "RAGBUS_LLM_BASE_URL is set: ragbus generates with the model, the peer would not"
    return None


class InlineEncoder(Encoder):
    """The loaded encoder, run in the calling thread: `aencode` is `encode`, no batcher."""

    def __init__(self, inner: Encoder) -> None:
        self.inner = inner
        self.name, self.dim = inner.name, inner.dim
        self.runtime, self.precision = inner.runtime, inner.precision

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.encode(texts)

    async def aencode(self, texts: list[str]) -> np.ndarray:
        return self.inner.encode(texts)


@dataclass
class Engines:
    """What the workers' engine functions ask of `infra.runtime.resources.Resources`, over
    the copied stores; passed where they take `Resources`."""

    settings: Settings
    inline: InlineEncoder
    store: EdgeVectorStore
    graph_store: EmbeddedGraphStore
    bm25: Bm25Sparse = field(default_factory=Bm25Sparse)
    cross_encoder: Reranker | None = None
    nli_model: NliModel | None = None

    async def encoder(self) -> Encoder:
        return self.inline

    def encoding(self) -> InlineEncoder:
        return self.inline

    async def vectors(self) -> EdgeVectorStore:
        return self.store

    async def sparse(self) -> Bm25Sparse:
        return self.bm25

    async def graph(self) -> EmbeddedGraphStore:
        return self.graph_store

    async def reranker(self) -> Reranker | None:
        return self.cross_encoder

    async def nli(self) -> NliModel | None:
        return self.nli_model

    def llm(self) -> None:
        return None  # `unsupported` refuses a configured model


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


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000


class _Worker:
    """One thread's event loop and classifier (the engines and stores are shared)."""

    def __init__(self, peer: SameWorkPeer, models: ModelSlot) -> None:
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
            cmd = ToolCommand(request_id=self.request_id, query=query, calls=[])
            tool_results = await run_tools(peer.tools, cmd)
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
        for channel, function in CHANNEL_FUNCTIONS.items():
            if found.weights.get(channel, 0.0) <= 0.0:
                continue
            cmd = SearchCommand(
                request_id=self.request_id,
                channel=channel,
                query=query,
                namespaces=[self.peer.namespace],
                top_k=self.peer.channel_top_k,
                query_vector=found.query_vector if channel.reads_query_vector else None,
            )
            hits = await getattr(channels, function)(resources, cmd)
            results[channel] = ranked(hits.chunks, channel)[: cmd.top_k]
        return results

    async def fuse(
        self, query: str, found: Classification, results: Rankings
    ) -> list[RetrievedChunk]:
        """`workers.fuse.router.fuse` for a first attempt: fusion, bridge, hydration, rerank."""
        peer, settings = self.peer, self.peer.settings
        engines, top_k = peer.engines, peer.top_k
        effective_weights(found.weights, results)  # the fusion phase reports them
        reranker = engines.cross_encoder
        depth = max(top_k, settings.rerank_top_n) if reranker is not None else top_k
        chunks = weighted_rrf(results, found.weights, k=settings.rrf_k, top_k=depth)
        if settings.graph_bridge and chunks:
            chunks, _ = await bridge(engines.graph_store, chunks, depth)
        chunks = await engines.store.read(engines.store.hydrate, chunks)
        if reranker is not None:
            chunks, _ = await rerank(reranker, query, chunks, settings.rerank_top_n)
            chunks = chunks[:top_k]
        channel_counts(results)
        channel_samples(results)
        return chunks


class SameWorkPeer:
    """ragbus's engines over copies of a namespace's stores; `answer` may run in T threads,
    each with its own worker number."""

    def __init__(self, settings: Settings, namespace: str, engines: Engines, tmp: Any) -> None:
        self.settings = settings
        self.namespace = namespace
        self.engines = engines
        self.top_k = settings.default_top_k
        self.channel_top_k = max(settings.channel_top_k, self.top_k)
        self.tools = default_registry(timeout_s=settings.tool_timeout_s / 2)
        self.chunks = engines.store.count(namespace)
        self.load_s = 0.0
        self._tmp = tmp
        self._models = ModelSlot(model_dir(settings))
        self._workers: dict[int, _Worker] = {}

    @classmethod
    def from_store_copy(
        cls, settings: Settings, namespace: str, *, encoder: Encoder | None = None
    ) -> SameWorkPeer:
        """Copy the namespace's shard and the graph, open them and load the engines;
        `encoder` defaults to the configured one. ValueError when it cannot do ragbus's work."""
        reason = unsupported(settings)
        if reason is not None:
            raise ValueError(reason)
        started = time.perf_counter()
        tmp = tempfile.TemporaryDirectory(prefix="ragbus-same-work-")
        try:
            peer = cls._open(settings, namespace, Path(tmp.name), encoder, tmp)
        except BaseException:
            tmp.cleanup()
            raise
        peer.load_s = time.perf_counter() - started
        return peer

    @classmethod
    def _open(
        cls, settings: Settings, namespace: str, root: Path, encoder: Encoder | None, tmp: Any
    ) -> SameWorkPeer:
        copy_shard(settings, namespace, root / "vectors")
        if settings.graph_path.is_dir():
            copy_tree(settings.graph_path, root / "graph")
        if encoder is None:
            from infra.retrieval.encoder import load_encoder

            encoder = load_encoder(settings)
        inline = InlineEncoder(encoder)
        store = EdgeVectorStore(root / "vectors", inline.dim, sparse_idf=Bm25Sparse.idf_modifier)
        graph = EmbeddedGraphStore(root / "graph")
        engines = Engines(settings, inline, store, graph)
        try:
            if not store.count(namespace):  # also: a shard of another encoder's vectors
                raise ValueError(f"namespace {namespace!r} holds no chunks")
            graph.load()
            _run(_settle(graph, inline))
            if settings.reranker_path is not None:
                from infra.retrieval.reranker import load_reranker

                engines.cross_encoder = load_reranker(settings)
            if settings.nli_path is not None:
                from infra.retrieval.nli import load_nli

                engines.nli_model = load_nli(settings)
            return cls(settings, namespace, engines, tmp)
        except BaseException:
            store.close()
            raise

    def __len__(self) -> int:
        return self.chunks

    def prepare(self, threads: int) -> None:
        """Workers 0 to `threads` - 1 made and warmed up before the load."""
        for n in range(threads):
            self._worker(n)

    def _worker(self, n: int) -> _Worker:
        """Worker `n`, made on first use and warmed up as the classify worker warms up (its
        zero-shot prototypes encoded, the trained model loaded)."""
        worker = self._workers.get(n)
        if worker is None:
            worker = self._workers[n] = _Worker(self, self._models)
            worker.loop.run_until_complete(worker.classifier.classify("warm up", None))
        return worker

    def answer(self, worker: int, query: str) -> Served:
        """One question, classified to critiqued, on worker `worker`'s loop; a worker number
        is used by one thread at a time."""
        mine = self._worker(worker)
        return mine.loop.run_until_complete(mine.serve(query))

    def describe(self) -> dict[str, Any]:
        encoder = self.engines.inline.inner
        return {
            "encoder": {
                "name": encoder.name,
                "runtime": encoder.runtime,
                "intra_op_threads": getattr(encoder, "threads", encoder_threads(self.settings)),
            },
            "reranker": getattr(self.engines.cross_encoder, "name", None),
            "nli": getattr(self.engines.nli_model, "name", None),
            "top_k": self.top_k,
            "channel_top_k": self.channel_top_k,
            "graph_bridge": self.settings.graph_bridge,
        }

    def close(self) -> None:
        for worker in self._workers.values():
            worker.loop.run_until_complete(worker.loop.shutdown_default_executor())
            worker.loop.close()
        self._workers.clear()
        self.engines.store.close()
        self._tmp.cleanup()


async def _settle(graph: EmbeddedGraphStore, encoder: InlineEncoder) -> None:
    """Communities made current once, before the load (see the module's docstring)."""
    if (await graph.stats())["communities_dirty"]:
        await graph.recompute_communities(embed=encoder.aencode)


def _run(coroutine: Any) -> Any:
    """Run a coroutine on a loop of its own, leaving the thread's current loop alone."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


def run_same_work(
    peer: SameWorkPeer,
    queries: Sequence[str],
    *,
    threads: int = 8,
    duration_s: float,
    warmup_s: float = 0.0,
    blas_threads: int | None = None,
) -> dict[str, Any]:
    """Closed-loop load on the same-work peer (`bench.closed_loop`); CPU is this process's
    over the measured seconds, the encoder's and BLAS's threads included. `stages_mean_ms`
    are wall times under the load: with more threads than cores they include the wait for a
    core and for the GIL, as ragbus's phase durations include the wait for its event loop."""
    peer.prepare(threads)
    load = closed_loop(
        peer.answer,
        queries,
        threads=threads,
        duration_s=duration_s,
        warmup_s=warmup_s,
        blas_threads=blas_threads,
    )
    served: list[Served] = load.results
    per_stage: dict[str, list[float]] = defaultdict(list)
    for one in served:
        for stage, ms in one.stages_ms.items():
            per_stage[stage].append(ms)
    return {
        "system": "same_work_peer",
        "chunks": len(peer),
        **load.figures(),
        "stages_mean_ms": {
            stage: round(sum(per_stage[stage]) / len(per_stage[stage]), 3)
            for stage in STAGES
            if per_stage[stage]
        },
        "answered": sum(bool(one.answer.strip()) for one in served),
        "cited": sum(one.citations > 0 for one in served),
        "generation_encoded_texts": sum(one.encoded for one in served),
        "intents": dict(Counter(one.intent for one in served)),
        "methods": dict(Counter(one.method for one in served)),
        "verdicts": dict(Counter(one.verdict for one in served)),
        "engines": {**peer.describe(), "blas_threads": blas_threads},
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "load_s": round(peer.load_s, 3),
    }


def bench_same_work(
    settings: Settings,
    ragbus: dict[str, Any],
    queries: Sequence[str],
    *,
    threads: int,
    duration_s: float,
    warmup_s: float,
    console: Console,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """`ragbus bench`'s same-work step: the peer's report and ragbus's ratio to it, or
    (`{"skipped": reason}`, None) when it cannot run. Any failure is a reason: the ragbus
    figures already measured must still be written."""
    namespace = ragbus["namespace"]
    try:
        with console.status(f"loading the same-work peer over a copy of {namespace!r}"):
            peer = SameWorkPeer.from_store_copy(settings, namespace)
    except Exception as exc:
        return {"skipped": f"{type(exc).__name__}: {exc}"}, None
    console.print(f"same-work peer: {threads} threads for {warmup_s:g} + {duration_s:g} s")
    try:  # no spinner: its thread's CPU would count as the peer's
        report = run_same_work(
            peer, queries, threads=threads, duration_s=duration_s, warmup_s=warmup_s
        )
    except Exception as exc:
        return {"skipped": f"{type(exc).__name__}: {exc}"}, None
    finally:
        peer.close()
    ratio = compare(ragbus, report)
    print_comparison(
        ragbus,
        report,
        ratio,
        console,
        title="ragbus and the same-work peer: ragbus's engines in one process, no bus",
        peer_does="ragbus's engines, no bus",
    )
    return report, ratio
