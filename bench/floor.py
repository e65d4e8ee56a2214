"""The floor: ragbus's message pattern in plain nats-py and redis-py, in one asyncio process.

What `ragbus bench-bus` measures itself against. A request here is the same traffic that
the tap (`bench.tap`) counted on the real path: a submission where it had one (else the
caller commits and sends the first commands itself, as the API in the orchestrator's process
does), the same stages of commands (one push consumer per step, as the workers have), one
result per command, the steps' caller events, the saga's own events and the terminal one,
all JetStream publishes with `Nats-Msg-Id` and an awaited ack into file-backed streams,
bodies of the same mean sizes, and the same number of Redis Lua commits of the request's
state. Callers wait on a core subscription to the events. No framework, no validation, no
HTTP, no process boundary: what the messages themselves cost in Python.

Run as `python -m bench.floor --nats URL --redis URL --pattern JSON ...`; it prints its report
as JSON on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import nats
import redis.asyncio as aioredis
from nats.aio.msg import Msg
from nats.js import api

from bench.cpu import CpuMeter
from bench.load import Outcome, summarize

PREFIX = "floor"
COMMIT = """
local n = redis.call('HINCRBY', KEYS[1], 'results', ARGV[2])
redis.call('HSET', KEYS[1], 'state', ARGV[1])
redis.call('EXPIRE', KEYS[1], 600)
return n
"""


@dataclass(frozen=True)
class Pattern:
    """One request's traffic, as the tap counted it on the real path."""

    stages: list[list[str]] = field(
        default_factory=lambda: [
            ["classify"],
            ["search.vector", "search.sparse", "search.graph_local", "search.graph_global"],
            ["fuse"],
            ["generate"],
            ["critic"],
        ]
    )
    submissions: int = 1
    """1: the caller publishes a submission that the saga consumes; 0: the caller takes the
    saga's first step itself (the API in the orchestrator's process, `api.submission`)."""
    step_events: int = 16
    saga_events: int = 1
    """Caller events of the saga's own, the terminal one included."""
    commits: int = 8
    submission_bytes: int = 300
    command_bytes: int = 300
    result_bytes: int = 300
    event_bytes: int = 300

    @classmethod
    def from_traffic(cls, traffic: dict[str, Any]) -> Pattern:
        kinds = traffic["by_kind"]
        return cls(
            stages=traffic["stages"],
            submissions=round(kinds["submission"]["messages"]),
            step_events=round(traffic["step_events_per_request"]),
            saga_events=max(1, round(traffic["saga_events_per_request"])),
            commits=round(traffic["redis_lua_calls_per_request"]),
            submission_bytes=kinds["submission"]["mean_bytes"],
            command_bytes=kinds["command"]["mean_bytes"],
            result_bytes=kinds["result"]["mean_bytes"],
            event_bytes=kinds["event"]["mean_bytes"],
        )

    @property
    def commands(self) -> int:
        return sum(len(stage) for stage in self.stages)

    @property
    def messages(self) -> int:
        return self.submissions + 2 * self.commands + self.step_events + self.saga_events


def _body(size: int, **fields: Any) -> bytes:
    """A JSON object of about `size` bytes: the fields, padded."""
    head = json.dumps(fields)
    pad = max(0, size - len(head) - 10)
    return json.dumps({**fields, "pad": "x" * pad}).encode()


class Floor:
    def __init__(self, nc: Any, js: Any, redis: aioredis.Redis, pattern: Pattern) -> None:
        self.nc, self.js, self.redis, self.p = nc, js, redis, pattern
        self.commit = redis.register_script(COMMIT)
        self.waiting: dict[str, asyncio.Future[float]] = {}
        # Commits beyond one per submission and one per result happen at submission; fewer
        # skip the first results' commits.
        self.extra_commits = pattern.commits - (1 + pattern.commands)
        per_command, spare = divmod(pattern.step_events, max(pattern.commands, 1))
        self.events_for = [per_command + (1 if i < spare else 0) for i in range(pattern.commands)]
        self.first_index = [
            sum(len(s) for s in pattern.stages[:i]) for i in range(len(pattern.stages))
        ]

    async def publish(self, subject: str, body: bytes) -> None:
        await self.js.publish(subject, body, headers={"Nats-Msg-Id": uuid.uuid4().hex})

    async def declare(self) -> None:
        for name, subjects, retention in (
            ("FLOOR_Q", [f"{PREFIX}.q.>"], api.RetentionPolicy.WORK_QUEUE),
            ("FLOOR_C", [f"{PREFIX}.c.>"], api.RetentionPolicy.WORK_QUEUE),
            ("FLOOR_R", [f"{PREFIX}.r.>"], api.RetentionPolicy.WORK_QUEUE),
            ("FLOOR_E", [f"{PREFIX}.e.>"], api.RetentionPolicy.LIMITS),
        ):
            await self.js.add_stream(
                api.StreamConfig(
                    name=name,
                    subjects=subjects,
                    retention=retention,
                    storage=api.StorageType.FILE,
                    duplicate_window=120.0,
                )
            )

    async def subscribe(self) -> None:
        steps = sorted({step for stage in self.p.stages for step in stage})
        for step in steps:
            durable = "floor-" + step.replace(".", "-").replace("_", "-")
            await self.js.subscribe(
                f"{PREFIX}.c.{step}",
                queue=durable,
                durable=durable,
                cb=self.on_command,
                manual_ack=True,
            )
        await self.js.subscribe(
            f"{PREFIX}.q.>", queue="floor-q", durable="floor-q", cb=self.on_query, manual_ack=True
        )
        await self.js.subscribe(
            f"{PREFIX}.r.>", queue="floor-r", durable="floor-r", cb=self.on_result, manual_ack=True
        )
        await self.nc.subscribe(f"{PREFIX}.e.>", cb=self.on_event)

    async def send_stage(self, rid: str, stage: int) -> None:
        first = self.first_index[stage]
        await asyncio.gather(
            *(
                self.publish(
                    f"{PREFIX}.c.{step}",
                    _body(self.p.command_bytes, request_id=rid, stage=stage, index=first + i),
                )
                for i, step in enumerate(self.p.stages[stage])
            )
        )

    async def start(self, rid: str, body: bytes) -> None:
        """The saga's first step: its commits, then the first stage's commands."""
        for _ in range(1 + max(self.extra_commits, 0)):
            await self.commit(keys=[f"{PREFIX}:{rid}"], args=[body, 0])
        await self.send_stage(rid, 0)

    async def on_query(self, msg: Msg) -> None:
        await self.start(json.loads(msg.data)["request_id"], msg.data)
        await msg.ack()

    async def on_command(self, msg: Msg) -> None:
        cmd = json.loads(msg.data)
        rid, index = cmd["request_id"], cmd["index"]
        subject = f"{PREFIX}.e.{rid}"
        for n in range(self.events_for[index]):
            await self.publish(subject, _body(self.p.event_bytes, type="phase", n=n))
        await self.publish(
            f"{PREFIX}.r.{msg.subject.removeprefix(PREFIX + '.c.')}",
            _body(self.p.result_bytes, request_id=rid, stage=cmd["stage"], index=index),
        )
        await msg.ack()

    async def on_result(self, msg: Msg) -> None:
        res = json.loads(msg.data)
        rid, stage, index = res["request_id"], res["stage"], res["index"]
        key = f"{PREFIX}:{rid}"
        if index < -self.extra_commits:
            done = int(await self.redis.hincrby(key, "results", 1))
        else:
            done = int(await self.commit(keys=[key], args=[msg.data, 1]))
        if done == self.first_index[stage] + len(self.p.stages[stage]):
            if stage + 1 < len(self.p.stages):
                await self.send_stage(rid, stage + 1)
            else:
                subject = f"{PREFIX}.e.{rid}"
                for n in range(self.p.saga_events):
                    last = n == self.p.saga_events - 1
                    await self.publish(
                        subject, _body(self.p.event_bytes, type="done" if last else "answer")
                    )
        await msg.ack()

    async def on_event(self, msg: Msg) -> None:
        event = json.loads(msg.data)
        if event.get("type") == "done":
            future = self.waiting.pop(msg.subject.rsplit(".", 1)[-1], None)
            if future is not None and not future.done():
                future.set_result(time.perf_counter())

    async def one(self) -> Outcome:
        rid = uuid.uuid4().hex
        started = time.perf_counter()
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiting[rid] = future
        submission = _body(self.p.submission_bytes, request_id=rid)
        if self.p.submissions:
            await self.publish(f"{PREFIX}.q.submitted", submission)
        else:
            await self.start(rid, submission)
        try:
            ended = await asyncio.wait_for(future, 30.0)
        except TimeoutError:
            self.waiting.pop(rid, None)
            return Outcome("unfinished", (time.perf_counter() - started) * 1000)
        return Outcome("completed", (ended - started) * 1000)


async def run_floor(
    nats_url: str,
    redis_url: str,
    pattern: Pattern,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    pids: dict[str, int] | None = None,
) -> dict[str, Any]:
    nc = await nats.connect(nats_url, name="ragbus-floor")
    redis = aioredis.Redis.from_url(redis_url)
    floor = Floor(nc, nc.jetstream(), redis, pattern)
    await floor.declare()
    await floor.subscribe()

    async def load(seconds: float) -> list[Outcome]:
        outcomes: list[Outcome] = []
        stop_at = time.monotonic() + seconds

        async def loop() -> None:
            while time.monotonic() < stop_at:
                outcomes.append(await floor.one())

        await asyncio.gather(*(loop() for _ in range(concurrency)))
        return outcomes

    try:
        if warmup_s > 0:
            await load(warmup_s)
        meter = CpuMeter({"floor": os.getpid(), **(pids or {})})
        meter.start()
        start = time.monotonic()
        outcomes = await load(duration_s)
        elapsed = time.monotonic() - start
        cpu = meter.stop()
    finally:
        await nc.drain()
        await redis.aclose()
    report = summarize(outcomes, elapsed, concurrency=concurrency, duration_s=duration_s, cpu=cpu)
    report["pattern"] = asdict(pattern)
    report["messages_per_request"] = pattern.messages
    report["bytes_per_request"] = (
        pattern.submissions * pattern.submission_bytes
        + pattern.commands * (pattern.command_bytes + pattern.result_bytes)
        + (pattern.step_events + pattern.saga_events) * pattern.event_bytes
    )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nats", required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--pattern", help="JSON of `Pattern`'s fields (default: the issue's).")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--pids", default="{}", help="JSON {name: pid} of servers to meter.")
    args = parser.parse_args()
    pattern = Pattern(**json.loads(args.pattern)) if args.pattern else Pattern()
    report = asyncio.run(
        run_floor(
            args.nats,
            args.redis,
            pattern,
            concurrency=args.concurrency,
            duration_s=args.duration,
            warmup_s=args.warmup,
            pids=json.loads(args.pids),
        )
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
