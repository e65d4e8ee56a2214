"""`ragbus bench`: closed-loop load on a running API, measured end to end.

C loops each ask a query, stream its events to `done`, and go again until S seconds
have passed, after W seconds of warm-up whose requests are not counted. A loop asks as a
client does (`AskPath`): by default in one request that submits and streams
(`POST /v1/chat`), or by submitting and then following the events URL, as the web page does.
Latency is submit-to-`done` as the caller sees it; phase durations are the ones the workers
measured and reported in their `phase` events; CPU is what the machine spent during the
measured seconds, less the load generator's own (`bench.cpu`).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from bench.cpu import CpuMeter, CpuUsage
from client import ApiError, RagbusClient

REQUEST_TIMEOUT_S = 60.0
RATE_LIMITED = 429


class AskPath(StrEnum):
    """How a loop asks: `chat`, one HTTP request that submits and streams the events
    (`POST /v1/chat`); `submit`, `POST /v1/queries`, then `GET` its events URL (what the web
    page does: a browser's `EventSource` only GETs)."""

    CHAT = "chat"
    SUBMIT = "submit"


@dataclass
class Outcome:
    """One request: `completed`, `failed`/`timed_out` (said the API), `error`, `unfinished`."""

    status: str
    latency_ms: float
    phases: list[tuple[str, float]] = field(default_factory=list)
    error: str | None = None
    http_status: int | None = None
    """The API's answer when it refused the request (429: the tenant's submission quota)."""


def load_queries(path: Path) -> list[str]:
    """One query per line, or JSONL objects with `query` (or `text`); `#` lines are comments."""
    queries: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("{"):
            record = json.loads(line)
            line = str(record.get("query") or record.get("text") or "").strip()
        if line:
            queries.append(line)
    if not queries:
        raise ValueError(f"no queries in {path}")
    return queries


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Linear-interpolated percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


async def run_one(
    client: RagbusClient,
    query: str,
    timeout_s: float,
    namespace: str | None = None,
    *,
    ask: AskPath = AskPath.CHAT,
    intent: str | None = None,
    narrowed: dict[str, Any] | None = None,
) -> Outcome:
    started = time.perf_counter()
    phases: list[tuple[str, float]] = []

    def elapsed_ms() -> float:
        return (time.perf_counter() - started) * 1000

    try:
        async with asyncio.timeout(timeout_s):
            namespaces = [namespace] if namespace else None
            if ask is AskPath.CHAT:
                messages = client.ask(query, namespaces=namespaces, intent=intent, filter=narrowed)
            else:
                submitted = await client.submit(
                    query, namespaces=namespaces, intent=intent, filter=narrowed
                )
                request_id = submitted["request_id"]
                messages = client.stream_events(request_id)
            async for message in messages:
                data = message.data.get("data") or {}
                if message.event == "phase" and data.get("status") == "completed":
                    if data.get("duration_ms") is not None:
                        phases.append((str(data["phase"]), float(data["duration_ms"])))
                elif message.event == "done":
                    return Outcome(str(data.get("status")), elapsed_ms(), phases)
    except TimeoutError:
        return Outcome("unfinished", elapsed_ms(), phases, f"no done within {timeout_s:g} s")
    except ApiError as exc:
        return Outcome("error", elapsed_ms(), phases, f"ApiError: {exc}", exc.status)
    except (httpx.HTTPError, ValueError) as exc:
        return Outcome("error", elapsed_ms(), phases, f"{type(exc).__name__}: {exc}")
    return Outcome("unfinished", elapsed_ms(), phases, "event stream ended before done")


Ask = Callable[[int, str], Awaitable[Outcome]]
"""One question asked through a door and followed to its end: `ask(loop, query)`."""


@dataclass
class Measured:
    outcomes: list[Outcome]
    elapsed_s: float
    cpu: CpuUsage


async def closed_loop(
    ask: Ask,
    queries: Sequence[str],
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float = 0.0,
    pids: dict[str, int] | None = None,
) -> Measured:
    """C loops each asking its queries one after another (loop i takes every C-th, from
    the i-th) for S seconds, after W seconds not counted; the CPU of the measured seconds."""

    async def load(seconds: float) -> list[Outcome]:
        outcomes: list[Outcome] = []
        stop_at = time.monotonic() + seconds

        async def loop(worker: int) -> None:
            n = worker
            while time.monotonic() < stop_at:
                outcomes.append(await ask(worker, queries[n % len(queries)]))
                n += concurrency

        await asyncio.gather(*(loop(i) for i in range(concurrency)))
        return outcomes

    if warmup_s > 0:
        await load(warmup_s)
    meter = CpuMeter(pids)
    meter.start()
    start = time.monotonic()
    outcomes = await load(duration_s)
    elapsed = time.monotonic() - start
    return Measured(outcomes, elapsed, meter.stop())


def client_limits(concurrency: int) -> httpx.Limits:
    return httpx.Limits(max_connections=concurrency * 2 + 4)


async def run_bench(
    api_url: str,
    queries: Sequence[str],
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float = 0.0,
    token: str | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
    pids: dict[str, int] | None = None,
    namespace: str | None = None,
    ask: AskPath = AskPath.CHAT,
    narrowed: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`pids`: processes of the system under test whose CPU is reported one by one;
    `namespace`: where the queries search (default: the API's); `ask`: how each loop asks;
    `narrowed`: every question's metadata filter."""
    transport = httpx.AsyncHTTPTransport(limits=client_limits(concurrency))
    async with RagbusClient(api_url, token=token, transport=transport) as client:

        async def one(_: int, query: str) -> Outcome:
            return await run_one(client, query, timeout_s, namespace, ask=ask, narrowed=narrowed)

        measured = await closed_loop(
            one,
            queries,
            concurrency=concurrency,
            duration_s=duration_s,
            warmup_s=warmup_s,
            pids=pids,
        )
    report = summarize(
        measured.outcomes,
        measured.elapsed_s,
        concurrency=concurrency,
        duration_s=duration_s,
        cpu=measured.cpu,
    )
    report["warmup_s"] = warmup_s
    report["ask"] = ask.value
    report["filter"] = narrowed
    return report


def summarize(
    outcomes: Sequence[Outcome],
    elapsed_s: float,
    *,
    concurrency: int,
    duration_s: float,
    cpu: CpuUsage | None = None,
) -> dict[str, Any]:
    completed = [o for o in outcomes if o.status == "completed"]
    latencies = [o.latency_ms for o in completed]
    by_phase: dict[str, list[float]] = defaultdict(list)
    for outcome in outcomes:
        for name, ms in outcome.phases:
            by_phase[name].append(ms)
    first_errors = [o.error for o in outcomes if o.error][:5]
    return {
        "requests": len(outcomes),
        "completed": len(completed),
        "errors": sum(o.status not in ("completed", "unfinished") for o in outcomes),
        "unfinished": sum(o.status == "unfinished" for o in outcomes),
        "rate_limited": sum(o.http_status == RATE_LIMITED for o in outcomes),
        "throughput_qps": round(len(completed) / elapsed_s, 3) if elapsed_s > 0 else 0.0,
        "latency_ms": {
            **{f"p{p}": _round(percentile(latencies, p)) for p in (50, 95, 99)},
            "max": _round(max(latencies, default=None)),
        },
        "phases": {
            name: {
                "p50_ms": _round(percentile(values, 50)),
                "p95_ms": _round(percentile(values, 95)),
                "count": len(values),
            }
            for name, values in sorted(by_phase.items())
        },
        "concurrency": concurrency,
        "duration_s": duration_s,
        "elapsed_s": round(elapsed_s, 3),
        "cpu": cpu.report(len(completed)) if cpu is not None else None,
        "sample_errors": first_errors,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def print_report(report: dict[str, Any], console: Console) -> None:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:,.1f}"

    summary = Table(title="ragbus bench", show_header=False)
    summary.add_row("requests", str(report["requests"]))
    summary.add_row("completed", str(report["completed"]))
    summary.add_row("errors", str(report["errors"]))
    summary.add_row("unfinished", str(report["unfinished"]))
    summary.add_row("throughput", f"{report['throughput_qps']:.2f} q/s")
    for key, value in report["latency_ms"].items():
        summary.add_row(f"latency {key}", f"{ms(value)} ms")
    cpu = report.get("cpu") or {}
    if cpu.get("server_cpu_ms_per_request") is not None:
        summary.add_row(
            "server CPU",
            f"{cpu['server_cpu_ms_per_request']:,.1f} ms/request "
            f"({cpu['server_cores_busy']:.2f} of {cpu['cores']} cores busy)",
        )
        kernel = cpu.get("process_kernel_share") or {}
        for name, ms_each in (cpu.get("process_cpu_ms_per_request") or {}).items():
            in_kernel = f" ({kernel[name]:.0%} in the kernel)" if name in kernel else ""
            summary.add_row(f"  {name}", f"{ms_each:,.1f} ms/request{in_kernel}")
        summary.add_row("client CPU", f"{cpu['client_cpu_ms_per_request']:,.1f} ms/request")
    summary.add_row("concurrency", str(report["concurrency"]))
    summary.add_row("duration", f"{report['duration_s']:g} s (ran {report['elapsed_s']:g} s)")
    console.print(summary)

    phases = Table(title="phases (as measured by the workers)")
    phases.add_column("phase")
    phases.add_column("p50 ms", justify="right")
    phases.add_column("p95 ms", justify="right")
    phases.add_column("count", justify="right")
    for name, stats in report["phases"].items():
        phases.add_row(name, ms(stats["p50_ms"]), ms(stats.get("p95_ms")), str(stats["count"]))
    console.print(phases)
    for error in report["sample_errors"]:
        console.print(f"[red]error:[/red] {error}")
    if report.get("rate_limited"):
        console.print(
            f"[yellow]{report['rate_limited']} requests were refused by the tenant's submission "
            "quota (429):[/yellow] the load asks faster than it allows; start the stack with "
            "RAGBUS_QUOTA_REQUESTS_PER_S=0 to measure above it"
        )
