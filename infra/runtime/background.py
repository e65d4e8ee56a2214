"""Corpus-wide CPU work off the query path: idle-priority child processes of a ragbus process
(one for ingestion's encoder passes and entity extraction, `Resources.background`; one for the
graph's community detection, `Resources.graph_background`, so that a detection never holds a
document's encoding back).

Ingestion's encoder passes and community detection are long, CPU-bound and never urgent. Run
in the process that answers queries, they took the GIL and the shared encoder from the
queries: 16-28 s per query right after an ingest (issue 10). Here they run in a child
process under `SCHED_IDLE` (at `BACKGROUND_NICE` where there is no such policy;
`infra.runtime.idle_priority`): when both want the cores the kernel gives them to the query
path, and an idle machine still gives the child everything. At nice 10 alone (weight 110
against 1024) an ingest still slowed queries: p95 1.62x idle during a scanned-PDF ingest.

The child is spawned (never forked: the parent holds NATS, Redis and ONNX Runtime threads) on
first use, ignores SIGINT (a terminal's Ctrl-C reaches it too; the parent stops it), loads its
own encoder once (with this process's settings, so on this process's share of the cores:
`infra.threads`), and is replaced if it dies. `RAGBUS_BACKGROUND_PROCESS=false` runs the same
functions in a thread of this process instead.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from infra.logging import get_logger
from infra.runtime.blas import limit_blas_threads
from infra.runtime.idle_priority import run_when_idle
from infra.settings import Settings

if TYPE_CHECKING:
    from infra.retrieval.encoder import Encoder
    from infra.retrieval.span_pooling import SpanItem, SpanVectors

log = get_logger(__name__)

T = TypeVar("T")

BACKGROUND_NICE = 10

_child_settings: Settings | None = None
_child_encoder: Encoder | None = None


def _child_init(settings: Settings, nice: int, parent_pid: int) -> None:
    global _child_settings
    # Ctrl-C at a terminal signals the whole foreground group, this child too: the parent
    # stops it (`BackgroundWork.close`), and a KeyboardInterrupt here would only print the
    # pool's 20-line traceback after the demo's answer (issue 54)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _child_settings = settings
    if nice:
        run_when_idle(nice)
    limit_blas_threads(settings.blas_threads)
    threading.Thread(
        target=_exit_with_parent, args=(parent_pid,), name="parent-watch", daemon=True
    ).start()


PARENT_WATCH_S = 1.0


def _exit_with_parent(parent_pid: int) -> None:
    """A parent that was SIGKILLed cannot shut its pool down: the child notices that it was
    handed to another parent and exits, rather than live on holding memory and models. (A
    thread, not PR_SET_PDEATHSIG, which fires when the parent's spawning *thread* ends.)"""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_WATCH_S)
    os._exit(0)


def _encoder() -> Encoder:
    """In the child: the configured encoder, loaded on first use."""
    global _child_encoder
    if _child_encoder is None:
        from infra.retrieval.encoder import load_encoder

        _child_encoder = load_encoder(_child_settings or Settings(), bulk=True)
    return _child_encoder


def child_encode(texts: list[str]) -> np.ndarray:
    """In the child: the configured encoder's embeddings of `texts`."""
    return _encoder().encode(texts)


def child_encode_spans(items: list[SpanItem]) -> list[SpanVectors]:
    """In the child: each text's embedding and its spans' vectors, from one pass."""
    return _encoder().encode_spans(items)


class BackgroundWork:
    """Runs picklable module-level functions in the niced child (or a thread, when off)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.in_process = not settings.background_process
        self._executor: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_child_init,
                    initargs=(self.settings, BACKGROUND_NICE, os.getpid()),
                )
                log.info("background_process_started", nice=BACKGROUND_NICE)
            return self._executor

    def _reset(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is broken:
                self._executor = None
        broken.shutdown(wait=False, cancel_futures=True)

    def submit(self, function: Callable[..., T], *args: Any) -> Future[T]:
        """`function(*args)` in the child; a child that died is replaced once, at this call."""
        if self.in_process:
            future: Future[T] = Future()
            try:
                future.set_result(function(*args))
            except BaseException as exc:  # handed to the caller, as a pool would
                future.set_exception(exc)
            return future
        pool = self._pool()
        try:
            return pool.submit(function, *args)
        except BrokenProcessPool:
            log.warning("background_process_replaced")
            self._reset(pool)
            return self._pool().submit(function, *args)

    def run(self, function: Callable[..., T], *args: Any) -> T:
        """Blocking: for callers already on a worker thread (the encoder's batcher)."""
        return self.submit(function, *args).result()

    async def call(self, function: Callable[..., T], *args: Any) -> T:
        """Awaitable: the event loop keeps serving while the child works."""
        if self.in_process:
            return await asyncio.to_thread(function, *args)
        return await asyncio.wrap_future(self.submit(function, *args))

    def close(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


class BackgroundEncoder:
    """The configured encoder, run in the background child: `aencode` and, where the model
    pools spans, `aencode_spans` for ingestion.

    Concurrent documents share passes through the same coalescing batchers as the in-process
    encoder; only the forward passes leave the process."""

    def __init__(
        self, work: BackgroundWork, dim: int, max_texts: int, *, pools_spans: bool = False
    ) -> None:
        from infra.retrieval.batching import CoalescingBatcher

        self.work = work
        self.dim = dim
        self.pools_spans = pools_spans
        self._batcher = CoalescingBatcher(self._encode, max_texts=max_texts)
        self._span_batcher = CoalescingBatcher(self._encode_spans, max_texts=max_texts)

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.work.run(child_encode, list(texts))

    def _encode_spans(self, items: list[SpanItem]) -> list[SpanVectors]:
        return self.work.run(child_encode_spans, items)

    async def aencode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return await self._batcher(texts)

    async def aencode_spans(self, items: list[SpanItem]) -> list[SpanVectors]:
        if not items:
            return []
        return await self._span_batcher(items)
