"""The closed loop both in-process peers are loaded with (`bench.peer`, `bench.same_work`):
T threads, each running its queries one after another for the duration, after a warm-up
that is not counted; each completed query's latency and result, the errors, and this
process's CPU over the measured seconds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from typing import Any

from threadpoolctl import threadpool_limits

from bench.cpu import own_cpu_s
from bench.load import percentile

BLAS_THREADS = 1
"""The peer's parallelism is its T threads, so `matrix @ q` runs on one BLAS thread, as in
any thread-per-request server: measured at 8 threads over 5,000 chunks on 2 cores, OpenBLAS's
own threads made the peer 47x slower (30 against 1,425 queries/s, encoder left out)."""


Work = Callable[[int, str], Any]
"""One query's work in a closed loop: `work(worker, query)`, worker = the loop's number."""


@dataclass
class Load:
    """A measured closed-loop run: each completed query's latency and result, the errors."""

    threads: int
    latencies_ms: list[float]
    results: list[Any]
    errors: list[str]
    elapsed_s: float
    cpu_s: float

    def figures(self) -> dict[str, Any]:
        """Counts, throughput, latency percentiles and this process's CPU per request."""
        completed, elapsed, cpu_s = len(self.latencies_ms), self.elapsed_s, self.cpu_s
        latency = {f"p{p}": _round(percentile(self.latencies_ms, p), 1) for p in (50, 95, 99)}
        return {
            "threads": self.threads,
            "requests": completed + len(self.errors),
            "completed": completed,
            "errors": len(self.errors),
            "throughput_qps": round(completed / elapsed, 3) if elapsed > 0 else 0.0,
            "latency_ms": latency,
            "cpu": {
                "cpu_s": round(cpu_s, 3),
                "cpu_ms_per_request": round(cpu_s / max(completed, 1) * 1000, 3),
                "cores_busy": round(cpu_s / elapsed, 3) if elapsed > 0 else None,
                "cores": os.cpu_count(),
            },
            "elapsed_s": round(elapsed, 3),
            "sample_errors": self.errors[:5],
        }


def _load(work: Work, queries: Sequence[str], threads: int, seconds: float) -> Load:
    """`threads` closed loops for `seconds`, each running its queries one after another."""
    stop_at = time.monotonic() + seconds
    latencies: list[list[float]] = [[] for _ in range(threads)]
    results: list[list[Any]] = [[] for _ in range(threads)]
    errors: list[str] = []

    def loop(worker: int) -> None:
        n = worker
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            try:
                result = work(worker, queries[n % len(queries)])
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            else:
                latencies[worker].append((time.perf_counter() - started) * 1000)
                results[worker].append(result)
            n += threads

    cpu0, start = own_cpu_s(), time.perf_counter()
    with ThreadPoolExecutor(threads, thread_name_prefix="peer") as pool:
        list(pool.map(loop, range(threads)))
    elapsed, cpu_s = time.perf_counter() - start, own_cpu_s() - cpu0
    flat = chain.from_iterable
    return Load(threads, list(flat(latencies)), list(flat(results)), errors, elapsed, cpu_s)


def closed_loop(
    work: Work,
    queries: Sequence[str],
    *,
    threads: int,
    duration_s: float,
    warmup_s: float = 0.0,
    blas_threads: int | None = BLAS_THREADS,
) -> Load:
    """`warmup_s` of load not counted, then `duration_s` measured; CPU is this process's over
    the measured seconds. `blas_threads`: BLAS's own threads (None: the library's default)."""
    if not queries:
        raise ValueError("no queries")
    with threadpool_limits(blas_threads, user_api="blas"):
        if warmup_s > 0:
            _load(work, queries, threads, warmup_s)
        return _load(work, queries, threads, duration_s)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
