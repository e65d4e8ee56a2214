"""`ragbus bench-bus`: the broker path's own cost, with instant engines (`bench.instant`).

Starts a nats-server and a redis-server on free ports with temporary storage, serves the
instant stack in a child process, and drives it with the same closed loop as `ragbus bench`.
Whatever CPU a request costs here is the bus, the saga, the worker runtime, the API and its
event stream: no model and no store did any work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.load import run_bench
from bench.stack import served_stack

READY_TIMEOUT_S = 60.0


async def bench_bus(
    queries: Sequence[str],
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    env = {
        # The instant vectors are random, so the real critic would send every request round
        # again; one attempt is what a request costs (NFCorpus averages 1.05 attempts).
        "RAGBUS_MAX_ATTEMPTS": "1",
        **(extra_env or {}),
    }
    async with served_stack(["-m", "bench.instant"], env, ready_timeout_s=READY_TIMEOUT_S) as stack:
        report = await run_bench(
            stack.url,
            queries,
            concurrency=concurrency,
            duration_s=duration_s,
            warmup_s=warmup_s,
            pids=stack.pids,
        )
    report["stack"] = "instant engines: real API, orchestrator, workers, nats-server, redis-server"
    return report
