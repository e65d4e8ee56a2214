"""The same-work peer: ragbus's own engines, in one process, loaded by T threads.

`ragbus bench` compares ragbus with two in-process peers. The retrieval-only one
(`bench.peer`) answers how ragbus compares with the simplest hybrid retriever; this one does
the work ragbus does for a question, with the same engine functions its workers call, minus
the design around them (NATS, the saga, Redis, the claim store, phase and token events, the
worker processes). ragbus's ratio to it is the design's own cost.

This module holds the peer (`SameWorkPeer`: opening the copied stores and loading the engines,
its workers, one question) and its load (`run_same_work`, `bench_same_work`). What one question
goes through, stage by stage, is `bench.same_work_worker`'s docstring; the engines over the
copied stores and the configurations refused are `bench.same_work_engines`.

Stores: the namespace's Edge shard and the whole embedded graph (snapshot and journal) are
copied to a temporary directory, as `bench.peer` copies the shard: a running `ragbus up` owns
them. A copy whose communities are stale is recomputed once before the load, as the running
store does in the background after its first global search. Configurations whose engines
cannot be opened beside a running stack or would not do the same work are refused with the
reason (`bench.same_work_engines.unsupported`).

Threads and pools, chosen as follows:
- the encoder is loaded as ragbus's classify process loads it (`load_encoder` for the query
  path: ONNX Runtime with one intra-op thread unless `RAGBUS_ENCODER_THREADS` says, one
  inter-op thread, no spinning). Each of the T threads runs its own forward pass on the
  shared, thread-safe session (`InlineEncoder`); ragbus's coalescing batcher would merge
  concurrent queries into one pass instead (its futures belong to one event loop, so it
  cannot serve T loops);
- BLAS: as ragbus's serving processes run it, `RAGBUS_BLAS_THREADS` threads (one by
  default; 0 = the library's default; `infra.runtime.blas`);
- each thread has its own worker (`bench.same_work_worker.Worker`): its own event loop and
  its own `IntentClassifier`; the trained intent model is loaded once and shared, as in
  ragbus's process.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.closed_loop import closed_loop
from bench.peer import compare, copy_shard, copy_tree, print_comparison
from bench.same_work_engines import Engines, InlineEncoder, unsupported
from bench.same_work_worker import STAGES, Served, Worker
from engines.classify.intent_model import ModelSlot
from engines.classify.model_meta import model_dir
from infra.retrieval.encoder import Encoder, encoder_threads
from infra.retrieval.graph.embedded import EmbeddedGraphStore
from infra.retrieval.sparse import Bm25Sparse
from infra.retrieval.vectors.edge import EdgeVectorStore
from infra.settings import Settings
from workers.tool.router import default_registry

if TYPE_CHECKING:
    from rich.console import Console


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
        self.filter: dict[str, Any] | None = None
        """Every question's metadata filter: ragbus's run's (`bench_same_work`)."""
        self.load_s = 0.0
        self._tmp = tmp
        self._models = ModelSlot(model_dir(settings))
        self._workers: dict[int, Worker] = {}

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

    def _worker(self, n: int) -> Worker:
        """Worker `n`, made on first use and warmed up as the classify worker warms up (its
        zero-shot prototypes encoded, the trained model loaded)."""
        worker = self._workers.get(n)
        if worker is None:
            worker = self._workers[n] = Worker(self, self._models)
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
) -> dict[str, Any]:
    """Closed-loop load on the same-work peer (`bench.closed_loop`); CPU is this process's
    over the measured seconds, the encoder's and BLAS's threads included. `stages_mean_ms`
    are wall times under the load: with more threads than cores they include the wait for a
    core and for the GIL, as ragbus's phase durations include the wait for its event loop."""
    peer.prepare(threads)
    blas_threads = peer.settings.blas_threads or None  # None: the library's default
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
    peer.filter = ragbus.get("filter")  # the same questions, narrowed the same way
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
