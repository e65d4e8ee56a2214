"""`ragbus bench-doors`: the time the OpenAI-compatible chat and MCP's `ask` add against
`/v1/chat`, on a running API; and, with an MCP route's question, what a call to an MCP
server's tool costs on the bus (`bench.doors`). It prints its figures and writes a JSON report."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from cli.common import (
    DEFAULT_API,
    DEFAULT_QUERIES,
    ApiUrl,
    Concurrency,
    Duration,
    Queries,
    Token,
    Warmup,
    check_api,
    console,
    interactive_logging,
    save_json,
)
from infra.settings import Settings


def register(app: typer.Typer) -> None:
    app.command("bench-doors")(bench_doors)


def bench_doors(
    queries: Queries = DEFAULT_QUERIES,
    concurrency: Concurrency = 8,
    duration: Duration = 20.0,
    warmup: Warmup = 3.0,
    rounds: Annotated[int, typer.Option(min=1, help="Turns each door takes.")] = 2,
    namespace: Annotated[
        str | None, typer.Option(help="Where the questions search (default: `default`).")
    ] = None,
    mcp_tool_query: Annotated[
        str | None,
        typer.Option(
            help="Also measure MCP tool calls: a question an MCP route of the stack's tool "
            "workers sends to a tool of a local stdio server (e.g. 'echo hello' with "
            "server-everything and a route `^echo (?P<message>.+)` to `echo`)."
        ),
    ] = None,
    builtin_tool_query: Annotated[
        str, typer.Option(help="The built-in tool's question the MCP one is compared with.")
    ] = "what is 17 * 23 + 4",
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
    out: Annotated[Path, typer.Option(help="Where to write the JSON report.")] = Path(
        "results/bench-doors.json"
    ),
) -> None:
    """The same questions at the same concurrency through /v1/chat, /v1/chat/completions
    (streaming) and MCP's `ask` (/mcp), the doors taking turns; each door's throughput and
    latency, and the two new doors against /v1/chat with the goals (throughput within 10 %,
    p95 within 10 % or 20 ms). Start the stack with RAGBUS_QUOTA_REQUESTS_PER_S=0."""
    from bench.doors import run_doors, run_tool_calls
    from bench.load import load_queries

    interactive_logging(Settings(), verbose=False)
    check_api(api, token)
    texts = load_queries(queries)
    with console.status("doors") as status:

        def progress(what: str) -> None:
            status.update(what)

        report = asyncio.run(
            run_doors(
                api,
                texts,
                concurrency=concurrency,
                duration_s=duration,
                warmup_s=warmup,
                rounds=rounds,
                token=token,
                namespace=namespace,
                progress=progress,
            )
        )
        if mcp_tool_query:
            report["tool_calls"] = asyncio.run(
                run_tool_calls(
                    api,
                    mcp_query=mcp_tool_query,
                    builtin_query=builtin_tool_query,
                    concurrency=concurrency,
                    duration_s=duration,
                    warmup_s=warmup,
                    rounds=rounds,
                    token=token,
                    progress=progress,
                )
            )
    save_json(report, out)
    print_doors(report)
    console.print(f"wrote {out}")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def print_doors(report: dict[str, Any]) -> None:
    table = Table(title=f"doors at c = {report['concurrency']}, {report['rounds']} rounds")
    for column in ("door", "q/s", "p50 ms", "p95 ms", "errors", "vs chat q/s", "p95 +ms", "goal"):
        table.add_column(column, justify="left" if column == "door" else "right")
    for door, figures in report["doors"].items():
        versus = report["vs_chat"].get(door, {})
        table.add_row(
            door,
            f"{figures['throughput_qps']:.1f}",
            _ms(figures["latency_ms"]["p50"]),
            _ms(figures["latency_ms"]["p95"]),
            str(figures["errors"] + figures["unfinished"]),
            "" if not versus else f"{versus['throughput_ratio']:.2f}x",
            "" if not versus else _ms(versus["p95_added_ms"]),
            "" if not versus else ("met" if versus["meets_goal"] else "missed"),
        )
    console.print(table)
    tools = report.get("tool_calls")
    if not tools:
        return
    table = Table(title="a tool call: an MCP server's over stdio against the calculator")
    for column in ("tool", "q/s", "p50 ms", "p95 ms", "tool step p50", "tool step p95"):
        table.add_column(column, justify="left" if column == "tool" else "right")
    for kind, figures in tools["kinds"].items():
        step = figures["phases"].get("tool_execution", {})
        table.add_row(
            kind,
            f"{figures['throughput_qps']:.1f}",
            _ms(figures["latency_ms"]["p50"]),
            _ms(figures["latency_ms"]["p95"]),
            _ms(step.get("p50_ms")),
            _ms(step.get("p95_ms")),
        )
    console.print(table)
    added = tools["mcp_added"]
    console.print(
        f"MCP adds: tool step p50 {_ms(added['tool_step_p50_ms'])} ms, "
        f"p95 {_ms(added['tool_step_p95_ms'])} ms; end to end p50 "
        f"{_ms(added['end_to_end_p50_ms'])} ms, p95 {_ms(added['end_to_end_p95_ms'])} ms"
    )
