"""`ragbus bench-doors`: the time a door adds, measured on a running API.

The same questions at the same concurrency through three doors, each one closed loop of C
asks for S seconds, the doors taking turns for R rounds (so that a machine's drift over the
run falls on all three alike):
- `chat`: ragbus's own `POST /v1/chat`, followed to its `done` event: the reference;
- `openai`: `POST /v1/chat/completions` with `stream: true`, read to `data: [DONE]`;
- `mcp`: MCP's `ask` tool over streamable HTTP at `/mcp`, one MCP session per loop, to its
  result.
Each door's latency is what its client sees, from asking to the end of the answer. The report
gives each door's throughput and latency and, for `openai` and `mcp`, their ratios to `chat`
with the issue's goals: throughput within 10 %, p95 within 10 % or 20 ms.

With `--mcp-tool-query` (a question one of the operator's MCP routes sends to a tool of a
local stdio server) it also measures what a call to an MCP server costs on the bus: that
question and `--builtin-tool-query` (one the calculator answers) asked as `tool` questions
through `/v1/chat` in turns; their latency, and the tool step's own duration (the tool
worker's `tool_execution` phase), p50 and p95, and the difference.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Final

import httpx
import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from bench.load import (
    REQUEST_TIMEOUT_S,
    Ask,
    AskPath,
    Outcome,
    client_limits,
    closed_loop,
    run_one,
    summarize,
)
from client import RagbusClient

DOORS: Final = ("chat", "openai", "mcp")
THROUGHPUT_GOAL: Final = 0.90
"""A door's throughput at least this share of `chat`'s."""
P95_GOAL_RATIO: Final = 1.10
P95_GOAL_MS: Final = 20.0
"""A door's p95 within 10 % of `chat`'s, or within 20 ms of it."""


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


async def openai_one(http: httpx.AsyncClient, query: str, model: str, timeout_s: float) -> Outcome:
    """One streamed completion, read to `[DONE]`; failed when a chunk carries an error."""
    started = time.perf_counter()

    def elapsed_ms() -> float:
        return (time.perf_counter() - started) * 1000

    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": query}]}
    failed: str | None = None
    try:
        async with http.stream(
            "POST", "/v1/chat/completions", json=body, timeout=timeout_s
        ) as response:
            if response.status_code != 200:
                await response.aread()
                return Outcome("error", elapsed_ms(), [], response.text[:300], response.status_code)
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line.removeprefix("data: ")
                if data == "[DONE]":
                    return Outcome("failed" if failed else "completed", elapsed_ms(), [], failed)
                if '"error"' in data and "error" in (chunk := json.loads(data)):
                    failed = str(chunk["error"].get("message"))[:300]
    except (httpx.HTTPError, ValueError) as exc:
        return Outcome("error", elapsed_ms(), [], f"{type(exc).__name__}: {exc}")
    return Outcome("unfinished", elapsed_ms(), [], "the stream ended before [DONE]")


async def mcp_one(session: ClientSession, query: str, namespace: str | None) -> Outcome:
    started = time.perf_counter()
    arguments: dict[str, Any] = {"question": query}
    if namespace:
        arguments["namespaces"] = [namespace]
    try:
        result = await session.call_tool("ask", arguments)
    except Exception as exc:  # the SDK's errors have no common base below Exception
        return Outcome("error", (time.perf_counter() - started) * 1000, [], repr(exc)[:300])
    latency = (time.perf_counter() - started) * 1000
    if result.is_error:
        text = " ".join(getattr(part, "text", "") for part in result.content)
        return Outcome("failed", latency, [], text[:300])
    return Outcome("completed", latency, [])


@asynccontextmanager
async def mcp_sessions(
    api_url: str, token: str | None, count: int, timeout_s: float
) -> AsyncIterator[list[ClientSession]]:
    """`count` initialised MCP sessions on the API's `/mcp`, closed on the way out."""
    async with AsyncExitStack() as stack:
        sessions: list[ClientSession] = []
        for _ in range(count):
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=_headers(token), timeout=timeout_s)
            )
            read, write = await stack.enter_async_context(
                streamable_http_client(f"{api_url.rstrip('/')}/mcp", http_client=http)
            )
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            sessions.append(session)
        yield sessions


def _model(namespace: str | None) -> str:
    return f"ragbus:{namespace}" if namespace and namespace != "default" else "ragbus"


async def measure_door(
    door: str,
    api_url: str,
    queries: Sequence[str],
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    token: str | None,
    namespace: str | None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> tuple[list[Outcome], float]:
    """One closed loop through `door`: its outcomes, and the seconds it was measured."""
    transport = httpx.AsyncHTTPTransport(limits=client_limits(concurrency))
    async with AsyncExitStack() as stack:
        ask: Ask
        if door == "chat":
            client = await stack.enter_async_context(
                RagbusClient(api_url, token=token, transport=transport)
            )

            async def ask(_: int, query: str) -> Outcome:
                return await run_one(client, query, timeout_s, namespace, ask=AskPath.CHAT)

        elif door == "openai":
            http = await stack.enter_async_context(
                httpx.AsyncClient(base_url=api_url, headers=_headers(token), transport=transport)
            )
            model = _model(namespace)

            async def ask(_: int, query: str) -> Outcome:
                return await openai_one(http, query, model, timeout_s)

        elif door == "mcp":
            sessions = await stack.enter_async_context(
                mcp_sessions(api_url, token, concurrency, timeout_s)
            )

            async def ask(loop: int, query: str) -> Outcome:
                return await mcp_one(sessions[loop], query, namespace)

        else:
            raise ValueError(f"unknown door {door!r} (known: {', '.join(DOORS)})")
        measured = await closed_loop(
            ask, queries, concurrency=concurrency, duration_s=duration_s, warmup_s=warmup_s
        )
    return measured.outcomes, measured.elapsed_s


async def run_doors(
    api_url: str,
    queries: Sequence[str],
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    rounds: int,
    token: str | None = None,
    namespace: str | None = None,
    doors: Sequence[str] = DOORS,
    progress: Any = None,
) -> dict[str, Any]:
    """Every door `rounds` times, in turn; each door's figures over all its rounds, and the
    ratios to `chat`'s."""
    outcomes: dict[str, list[Outcome]] = {door: [] for door in doors}
    elapsed: dict[str, float] = dict.fromkeys(doors, 0.0)
    for round_number in range(rounds):
        for door in doors:
            if progress is not None:
                progress(f"round {round_number + 1}/{rounds}: {door}")
            got, seconds = await measure_door(
                door,
                api_url,
                queries,
                concurrency=concurrency,
                duration_s=duration_s,
                warmup_s=warmup_s,
                token=token,
                namespace=namespace,
            )
            outcomes[door].extend(got)
            elapsed[door] += seconds
    report: dict[str, Any] = {
        "doors": {
            door: summarize(
                outcomes[door],
                elapsed[door],
                concurrency=concurrency,
                duration_s=duration_s * rounds,
            )
            for door in doors
        },
        "concurrency": concurrency,
        "duration_s_per_round": duration_s,
        "warmup_s": warmup_s,
        "rounds": rounds,
        "queries": len(queries),
        "namespace": namespace or "default",
    }
    report["vs_chat"] = compare(report["doors"])
    return report


def compare(doors: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each other door's throughput and p95 against `chat`'s, and whether it meets the goal."""
    base = doors.get("chat")
    if base is None:
        return {}
    compared: dict[str, Any] = {}
    for door, figures in doors.items():
        if door == "chat":
            continue
        ratio = (
            figures["throughput_qps"] / base["throughput_qps"] if base["throughput_qps"] else None
        )
        p95, base_p95 = figures["latency_ms"]["p95"], base["latency_ms"]["p95"]
        added = None if p95 is None or base_p95 is None else p95 - base_p95
        p95_ok = added is not None and (added <= P95_GOAL_MS or p95 <= base_p95 * P95_GOAL_RATIO)
        compared[door] = {
            "throughput_ratio": None if ratio is None else round(ratio, 3),
            "p95_added_ms": None if added is None else round(added, 1),
            "p95_ratio": None if not base_p95 or p95 is None else round(p95 / base_p95, 3),
            "meets_goal": bool(ratio is not None and ratio >= THROUGHPUT_GOAL and p95_ok),
        }
    return compared


TOOL_PHASE: Final = "tool_execution"


async def run_tool_calls(
    api_url: str,
    *,
    mcp_query: str,
    builtin_query: str,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    rounds: int,
    token: str | None = None,
    progress: Any = None,
) -> dict[str, Any]:
    """A question planned to an MCP tool against one planned to the calculator, both asked
    as `tool` questions: end to end and the tool step, p50 and p95, and what MCP adds."""
    kinds = {"builtin": builtin_query, "mcp": mcp_query}
    outcomes: dict[str, list[Outcome]] = {kind: [] for kind in kinds}
    elapsed: dict[str, float] = dict.fromkeys(kinds, 0.0)
    for round_number in range(rounds):
        for kind, query in kinds.items():
            if progress is not None:
                progress(f"round {round_number + 1}/{rounds}: {kind} tool")
            transport = httpx.AsyncHTTPTransport(limits=client_limits(concurrency))
            async with RagbusClient(api_url, token=token, transport=transport) as client:

                async def ask(_: int, question: str, client: RagbusClient = client) -> Outcome:
                    return await run_one(
                        client, question, REQUEST_TIMEOUT_S, None, ask=AskPath.CHAT, intent="tool"
                    )

                measured = await closed_loop(
                    ask, [query], concurrency=concurrency, duration_s=duration_s, warmup_s=warmup_s
                )
            outcomes[kind].extend(measured.outcomes)
            elapsed[kind] += measured.elapsed_s
    figures = {
        kind: summarize(
            outcomes[kind], elapsed[kind], concurrency=concurrency, duration_s=duration_s * rounds
        )
        for kind in kinds
    }
    added: dict[str, float | None] = {}
    for stat in ("p50", "p95"):
        mcp_tool = figures["mcp"]["phases"].get(TOOL_PHASE, {}).get(f"{stat}_ms")
        builtin_tool = figures["builtin"]["phases"].get(TOOL_PHASE, {}).get(f"{stat}_ms")
        added[f"tool_step_{stat}_ms"] = (
            None if mcp_tool is None or builtin_tool is None else round(mcp_tool - builtin_tool, 1)
        )
        mcp_end = figures["mcp"]["latency_ms"][stat]
        builtin_end = figures["builtin"]["latency_ms"][stat]
        added[f"end_to_end_{stat}_ms"] = (
            None if mcp_end is None or builtin_end is None else round(mcp_end - builtin_end, 1)
        )
    return {
        "queries": kinds,
        "kinds": figures,
        "mcp_added": added,
        "concurrency": concurrency,
        "rounds": rounds,
    }
