"""What a request puts on the bus and asks of Redis, counted from the outside.

`BusTap` is a core-NATS subscription on `rag.>`: JetStream publishes are NATS messages too,
so it sees every submission, command, result and caller event as it is published, with its
headers, and files each under its request. Redis's `MONITOR` says which commands (and Lua
calls) the same requests cost. `ragbus bench-bus` runs a few requests one
at a time under the tap after its measured run; the floor (`bench.floor`) then replays the
same pattern in plain nats-py and redis-py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import nats
import redis.asyncio as aioredis
from nats.aio.msg import Msg

KINDS = ("submission", "command", "result", "event")
SAGA_EVENT_TYPES = frozenset({"answer", "done", "error"})
"""Caller events the orchestrator publishes itself; phase and token events come from steps."""
LUA_COMMANDS = ("evalsha", "eval", "fcall", "evalsha_ro", "eval_ro", "fcall_ro")


def header_bytes(headers: dict[str, str] | None) -> int:
    """The headers' size on the wire: `NATS/1.0\\r\\n`, one `k: v\\r\\n` each, `\\r\\n`."""
    if not headers:
        return 0
    return 12 + sum(len(k) + len(v) + 4 for k, v in headers.items())


def _kind(subject: str) -> str | None:
    if subject.startswith("rag.query."):
        return "submission"
    if subject.startswith("rag.cmd."):
        return "command"
    if subject.startswith("rag.res."):
        return "result"
    if subject.startswith("rag.events."):
        return "event"
    return None


@dataclass
class Seen:
    kind: str
    subject: str
    size: int
    event_type: str | None = None


@dataclass
class RequestTraffic:
    messages: list[Seen] = field(default_factory=list)

    def stages(self) -> list[list[str]]:
        """The commands in the order the saga sent them, grouped into fan-outs: commands sent
        with no result between them are one stage (`search.vector`, `search.sparse`, ...)."""
        stages: list[list[str]] = []
        open_stage = False
        for seen in self.messages:
            if seen.kind == "command":
                if not open_stage:
                    stages.append([])
                    open_stage = True
                stages[-1].append(seen.subject.removeprefix("rag.cmd."))
            elif seen.kind == "result":
                open_stage = False
        return stages


class BusTap:
    """`async with BusTap(nats_url) as tap:` counts what is published on `rag.>` meanwhile."""

    def __init__(self, nats_url: str) -> None:
        self._url = nats_url
        self._nc: Any = None
        self.requests: dict[str, RequestTraffic] = defaultdict(RequestTraffic)

    async def __aenter__(self) -> BusTap:
        self._nc = await nats.connect(self._url, name="ragbus-bench-tap")
        await self._nc.subscribe("rag.>", cb=self._on_message)
        await self._nc.flush()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._nc.flush()
        await self._nc.drain()

    async def _on_message(self, msg: Msg) -> None:
        kind = _kind(msg.subject)
        if kind is None:
            return
        try:
            body = json.loads(msg.data)
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        request_id = body.get("request_id")
        if kind == "event":
            request_id = msg.subject.rsplit(".", 1)[-1]
        if not isinstance(request_id, str):
            return
        seen = Seen(
            kind=kind,
            subject=msg.subject,
            size=len(msg.data) + header_bytes(msg.headers),
            event_type=str(body.get("type")) if kind == "event" else None,
        )
        self.requests[request_id].messages.append(seen)


class RedisTap:
    """`async with RedisTap(redis_url) as tap:` counts the commands clients send meanwhile
    (`MONITOR`), by name; what Lua scripts call inside themselves is kept apart."""

    def __init__(self, redis_url: str) -> None:
        self._client = aioredis.Redis.from_url(redis_url)
        self.calls: Counter[str] = Counter()
        self.inside_lua: Counter[str] = Counter()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RedisTap:
        ready = asyncio.Event()
        self._task = asyncio.create_task(self._listen(ready))
        await ready.wait()
        return self

    async def _listen(self, ready: asyncio.Event) -> None:
        async with self._client.monitor() as monitor:
            ready.set()
            async for command in monitor.listen():
                name = command["command"].split(" ", 1)[0].lower()
                if command["client_type"] == "lua":
                    self.inside_lua[name] += 1
                else:
                    self.calls[name] += 1

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.sleep(0.1)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._client.aclose()


def traffic_report(
    requests: dict[str, RequestTraffic],
    redis_calls: Counter[str],
    inside_lua: Counter[str],
    completed: int,
) -> dict[str, Any]:
    """Per request means: messages and bytes by kind, the caller events by type, the stages
    of commands, and Redis commands (Lua calls apart)."""
    n = max(len(requests), 1)
    count: Counter[str] = Counter()
    size: Counter[str] = Counter()
    events: Counter[str] = Counter()
    stage_patterns: Counter[str] = Counter()
    for traffic in requests.values():
        for seen in traffic.messages:
            count[seen.kind] += 1
            size[seen.kind] += seen.size
            if seen.event_type:
                events[seen.event_type] += 1
        stage_patterns[json.dumps(traffic.stages())] += 1
    per = max(completed, 1)
    lua = sum(redis_calls[name] for name in LUA_COMMANDS)
    common_stages = json.loads(stage_patterns.most_common(1)[0][0]) if stage_patterns else []
    saga_events = sum(v for k, v in events.items() if k in SAGA_EVENT_TYPES)
    return {
        "requests": len(requests),
        "messages_per_request": round(sum(count.values()) / n, 2),
        "bytes_per_request": round(sum(size.values()) / n),
        "by_kind": {
            kind: {
                "messages": round(count[kind] / n, 2),
                "mean_bytes": round(size[kind] / count[kind]) if count[kind] else 0,
            }
            for kind in KINDS
        },
        "events_by_type": {k: round(v / n, 2) for k, v in sorted(events.items())},
        "step_events_per_request": round((count["event"] - saga_events) / n, 2),
        "saga_events_per_request": round(saga_events / n, 2),
        "stages": common_stages,
        "redis_commands_per_request": round(sum(redis_calls.values()) / per, 2),
        "redis_commands_inside_lua_per_request": round(sum(inside_lua.values()) / per, 2),
        "redis_lua_calls_per_request": round(lua / per, 2),
        "redis_by_command": {
            k: round(v / per, 2) for k, v in sorted(redis_calls.items()) if v >= per / 2
        },
    }
