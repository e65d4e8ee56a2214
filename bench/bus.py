"""`ragbus bench-bus`: the broker path's own cost, with instant engines (`bench.instant`),
beside its floor: the same messages in plain nats-py and redis-py (`bench.floor`).

Starts a nats-server and a redis-server on free ports with temporary storage, serves the
instant stack in a child process, and drives it with the same closed loop as `ragbus bench`.
Whatever CPU a request costs here is the bus, the saga, the worker runtime, the API and its
event stream: no model and no store did any work. Then requests one at a time give the
latency at c = 1, and a few more under the tap (`bench.tap`) count what a request puts on the
bus and asks of Redis; the floor replays exactly that pattern on fresh servers, at the same
concurrency and duration.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.cpu import python_cpu_ms
from bench.floor import Pattern
from bench.ledger import ledger, record
from bench.load import AskPath, Outcome, run_bench, run_one, summarize
from bench.stack import ROOT, served_stack
from bench.tap import BusTap, RedisTap, traffic_report
from client import RagbusClient
from infra.runtime.services import free_port, start_nats, start_redis

READY_TIMEOUT_S = 60.0
ONE_AT_A_TIME = 40
TAPPED_REQUESTS = 20


async def bench_bus(
    queries: Sequence[str],
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    extra_env: dict[str, str] | None = None,
    floor: bool = True,
    profile: bool = False,
    ask: AskPath = AskPath.CHAT,
) -> dict[str, Any]:
    env = {
        # The instant vectors are random, so the real critic would send every request round
        # again; one attempt is what a request costs (NFCorpus averages 1.05 attempts).
        "RAGBUS_MAX_ATTEMPTS": "1",
        # one tenant asks as fast as the path answers: its submission quota (50 a second by
        # default) would cap the run and answer the rest with a 429 each, counted as errors
        "RAGBUS_QUOTA_REQUESTS_PER_S": "0",
        **(extra_env or {}),
    }
    async with served_stack(["-m", "bench.instant"], env, ready_timeout_s=READY_TIMEOUT_S) as stack:
        profiling = (
            asyncio.create_task(
                record(
                    stack.pids["ragbus"],
                    delay_s=warmup_s + 1,
                    seconds=duration_s - 2,
                    subprocesses=True,
                )
            )
            if profile
            else None
        )
        report = await run_bench(
            stack.url,
            queries,
            concurrency=concurrency,
            duration_s=duration_s,
            warmup_s=warmup_s,
            pids=stack.pids,
            ask=ask,
        )
        if profiling is not None:
            cpu = (report.get("cpu") or {}).get("process_cpu_ms_per_request") or {}
            report["ledger"] = ledger(await profiling, python_cpu_ms(cpu))
        traffic, sequential = await tapped_requests(
            stack.url, stack.nats_url, stack.redis_url, queries, ask=ask
        )
    report["stack"] = "instant engines: real API, orchestrator, workers, nats-server, redis-server"
    report["traffic"] = traffic
    report["one_at_a_time"] = sequential
    report["messages_per_request"] = traffic["messages_per_request"]
    report["bytes_per_request"] = traffic["bytes_per_request"]
    if floor:
        pattern = Pattern.from_traffic(traffic)
        floor_report = await run_floor_process(
            pattern, concurrency=concurrency, duration_s=duration_s, warmup_s=warmup_s
        )
        report["floor"] = floor_report
        report["ratio_to_floor"] = ratio_to_floor(report, floor_report)
    return report


async def tapped_requests(
    api_url: str,
    nats_url: str,
    redis_url: str,
    queries: Sequence[str],
    *,
    ask: AskPath = AskPath.CHAT,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`ONE_AT_A_TIME` requests one after another, for their latency at c = 1; then
    `TAPPED_REQUESTS` more under the tap (which costs time of its own), for the traffic."""
    latencies: list[Outcome] = []
    outcomes: list[Outcome] = []
    async with RagbusClient(api_url) as client:
        started = time.monotonic()
        for n in range(ONE_AT_A_TIME):
            latencies.append(await run_one(client, queries[n % len(queries)], 30.0, ask=ask))
        elapsed = time.monotonic() - started
        async with BusTap(nats_url) as tap, RedisTap(redis_url) as redis_tap:
            for n in range(TAPPED_REQUESTS):
                outcomes.append(await run_one(client, queries[n % len(queries)], 30.0, ask=ask))
            await asyncio.sleep(0.2)  # the last request's trailing messages reach the tap
    traffic = traffic_report(
        dict(tap.requests), redis_tap.calls, redis_tap.inside_lua, len(outcomes)
    )
    return traffic, summarize(latencies, elapsed, concurrency=1, duration_s=elapsed)


async def run_floor_process(
    pattern: Pattern, *, concurrency: int, duration_s: float, warmup_s: float
) -> dict[str, Any]:
    """`python -m bench.floor` on fresh servers; its JSON report."""
    with tempfile.TemporaryDirectory(prefix="ragbus-floor-") as tmp:
        root = Path(tmp)
        nats = start_nats(free_port(), root / "nats")
        redis = start_redis(free_port(), root / "redis", persistent=False)
        try:
            pids = {"nats-server": nats.process.pid, "redis-server": redis.process.pid}
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.floor",
                "--nats", nats.url, "--redis", redis.url,
                "--pattern", json.dumps(pattern.__dict__),
                "--concurrency", str(concurrency),
                "--duration", str(duration_s), "--warmup", str(warmup_s),
                "--pids", json.dumps(pids),
                cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await child.communicate()
        finally:
            redis.stop()
            nats.stop()
    if child.returncode != 0:
        raise RuntimeError(f"the floor failed: {err.decode(errors='replace')[-2000:]}")
    report: dict[str, Any] = json.loads(out)
    return report


def ratio_to_floor(ragbus: dict[str, Any], floor: dict[str, Any]) -> dict[str, Any]:
    """ragbus over the floor: CPU per request (ragbus's processes against the floor's one
    Python process), throughput, and the messages and bytes per request."""
    ours = (ragbus.get("cpu") or {}).get("process_cpu_ms_per_request") or {}
    theirs = (floor.get("cpu") or {}).get("process_cpu_ms_per_request") or {}
    python_ours = python_cpu_ms(ours)
    python_floor = theirs.get("floor")
    return {
        "python_cpu_ms_per_request": {"ragbus": round(python_ours, 2), "floor": python_floor},
        "cpu_per_request": _div(python_ours, python_floor),
        "nats_cpu_per_request": _div(ours.get("nats-server"), theirs.get("nats-server")),
        "throughput": _div(ragbus.get("throughput_qps"), floor.get("throughput_qps")),
        "messages_per_request": ragbus["traffic"]["messages_per_request"],
        "bytes_per_request": ragbus["traffic"]["bytes_per_request"],
    }


def _div(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else round(a / b, 2)
