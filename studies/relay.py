"""What the API spends to relay one caller event to a reader: the SSE path alone.

A request's events reach its caller through the API process: the event hub's consumer hands
each to the request's reader, which turns it into an SSE event and writes it to the HTTP
response (`api.event_hub`, `api.sse`). This measures that path and nothing else. It starts the
instant stack (`bench.instant`) on its own servers, records a request the saga never hears of,
opens its event stream with the real client, and publishes `--events` phase events on its
subject, `--batch` to a message (a `phases` message above 1, as a step sends its phases), the
messages `--pace` seconds apart (0: as fast as they go, so the API handles them in bursts),
then a `done`. The API process's CPU over that window, less what it spends idle in as long, is
divided by the events:

    python -m studies.relay --events 2000 --pace 0.002 --out results/relay.json

A request's events come a few milliseconds apart, so the paced figure is the one a request
pays; the burst figure is the Python alone, without a wake-up per event.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import nats
import redis.asyncio as aioredis

from bench.cpu import process_cpu_s
from bench.provenance import run_record
from bench.stack import served_stack
from client import RagbusClient
from contracts import subjects as sj
from contracts.enums import Phase, PhaseStatus, RequestStatus
from contracts.envelope import utcnow
from contracts.events import DoneData, DoneEvent, PhaseData, PhaseEvent, PhasesEvent
from contracts.queries import QuerySubmitted
from infra.settings import Settings
from infra.telemetry import mint_trace
from orchestrator.store import StateStore

IDLE_S = 5.0
READY_TIMEOUT_S = 60.0


async def _idle_cpu_per_s(pid: int) -> float:
    before = process_cpu_s(pid) or 0.0
    await asyncio.sleep(IDLE_S)
    return ((process_cpu_s(pid) or 0.0) - before) / IDLE_S


def _phase(request_id: str, submitted: QuerySubmitted) -> PhaseEvent:
    return PhaseEvent(
        request_id=request_id,
        tenant="default",
        trace=submitted.trace,
        data=PhaseData(
            phase=Phase.VECTOR_SEARCH,
            status=PhaseStatus.COMPLETED,
            started_at=utcnow(),
            duration_ms=1.0,
            metadata={"count": 20},
        ),
    )


async def _one_stream(
    api_url: str,
    js: Any,
    store: StateStore,
    pid: int,
    request_id: str,
    events: int,
    pace: float,
    batch: int = 1,
) -> dict[str, float]:
    """Publish `events` phase events and a `done` on a fresh request's subject while one reader
    follows it through the API, `batch` to a message (a `phases` message when more than one, as
    a step sends them); the API process's CPU and the wall time it took."""
    submitted = QuerySubmitted(
        request_id=request_id, tenant="default", query="relay", trace=mint_trace()
    )
    await store.create(submitted)  # recorded, never published: no step sends anything
    subject = sj.events_subject("default", request_id)
    received = 0

    async def read() -> None:
        nonlocal received
        async with RagbusClient(api_url) as client:
            async for _ in client.stream_events(request_id):
                received += 1

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.5)  # the reader is registered with the hub
    cpu0, wall0 = process_cpu_s(pid) or 0.0, time.perf_counter()
    for n in range(0, events, batch):
        phases = [_phase(request_id, submitted) for _ in range(min(batch, events - n))]
        message = phases[0] if len(phases) == 1 else PhasesEvent.of(phases)
        headers = {"Nats-Msg-Id": f"{request_id}-{n}"}
        await js.publish(subject, message.model_dump_json().encode(), headers=headers)
        if pace:
            await asyncio.sleep(pace)
    done = DoneEvent(
        request_id=request_id,
        tenant="default",
        trace=submitted.trace,
        data=DoneData(status=RequestStatus.COMPLETED),
    )
    await js.publish(subject, done.model_dump_json().encode())
    await asyncio.wait_for(reader, 120)
    return {
        "cpu_s": (process_cpu_s(pid) or 0.0) - cpu0,
        "wall_s": time.perf_counter() - wall0,
        "received": received,
    }


async def bench_relay(events: int, pace: float, batch: int = 1) -> dict[str, Any]:
    env = {"RAGBUS_QUOTA_REQUESTS_PER_S": "0", "RAGBUS_REQUEST_TIMEOUT_S": "600"}
    async with served_stack(["-m", "bench.instant"], env, ready_timeout_s=READY_TIMEOUT_S) as stack:
        redis = aioredis.from_url(stack.redis_url)
        nc = await nats.connect(stack.nats_url)
        try:
            store = StateStore(redis, Settings(redis_url=stack.redis_url))
            pid = stack.pids["ragbus"]  # the API's process
            idle = await _idle_cpu_per_s(pid)
            rounds = {}
            for name in ("warm-up", "measured"):
                request_id = f"relay{name.replace('-', '')}{int(time.time() * 1000)}"
                rounds[name] = await _one_stream(
                    stack.url, nc.jetstream(), store, pid, request_id, events, pace, batch
                )
        finally:
            await nc.close()
            await redis.aclose()
    measured = rounds["measured"]
    busy_s = measured["cpu_s"] - idle * measured["wall_s"]
    return {
        "events": events,
        "pace_s": pace,
        "batch": batch,
        "received": measured["received"],
        "api_cpu_us_per_event": round(busy_s / events * 1e6, 1),
        "idle_cpu_ms_per_s": round(idle * 1000, 2),
        "wall_s": round(measured["wall_s"], 3),
        "rounds": rounds,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--pace", type=float, default=0.002, help="seconds between messages")
    parser.add_argument(
        "--batch", type=int, default=1, help="phase events a message (a `phases` message above 1)"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    report = asyncio.run(bench_relay(args.events, args.pace, args.batch))
    print(
        f"{report['received'] - 1} events relayed, {args.batch} a message {args.pace:g} s apart: "
        f"{report['api_cpu_us_per_event']} µs of the API's CPU an event "
        f"(idle {report['idle_cpu_ms_per_s']} ms a second subtracted)"
    )
    if args.out:
        report["run"] = run_record()
        given = sys.argv[1:] if argv is None else argv
        report["run"]["command"] = shlex.join(["python", "-m", "studies.relay", *given])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
