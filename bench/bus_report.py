"""`ragbus bench-bus`'s second table: ragbus against its floor, and what a request carries."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}{unit}"
    return f"{value:,}{unit}"


def print_floor(report: dict[str, Any], console: Console) -> None:
    traffic = report.get("traffic") or {}
    table = Table(title="a request on the bus (tapped, one at a time)", show_header=False)
    table.add_row("messages", _fmt(traffic.get("messages_per_request")))
    table.add_row("bytes", _fmt(traffic.get("bytes_per_request")))
    for kind, stats in (traffic.get("by_kind") or {}).items():
        table.add_row(f"  {kind}", f"{stats['messages']:g} x {stats['mean_bytes']:,} B")
    table.add_row(
        "caller events",
        ", ".join(f"{k} {v:g}" for k, v in (traffic.get("events_by_type") or {}).items()),
    )
    table.add_row("stages", " -> ".join(",".join(s) for s in traffic.get("stages") or []))
    table.add_row("redis commands", _fmt(traffic.get("redis_commands_per_request")))
    table.add_row("  of them Lua", _fmt(traffic.get("redis_lua_calls_per_request")))
    table.add_row(
        "  by command", ", ".join(f"{k} {v:g}" for k, v in traffic["redis_by_command"].items())
    )
    table.add_row("  called inside Lua", _fmt(traffic.get("redis_commands_inside_lua_per_request")))
    latency = (report.get("one_at_a_time") or {}).get("latency_ms") or {}
    table.add_row("c = 1 latency p50", _fmt(latency.get("p50"), " ms"))
    console.print(table)

    floor = report.get("floor")
    ratio = report.get("ratio_to_floor")
    if not floor or not ratio:
        return
    versus = Table(title="ragbus against its floor (same messages, plain nats-py + redis-py)")
    versus.add_column("")
    versus.add_column("ragbus", justify="right")
    versus.add_column("floor", justify="right")
    versus.add_column("ratio", justify="right")
    cpu = ratio["python_cpu_ms_per_request"]
    versus.add_row(
        "Python CPU ms/request", _fmt(cpu["ragbus"]), _fmt(cpu["floor"]),
        _fmt(ratio["cpu_per_request"], "x"),
    )  # fmt: skip
    versus.add_row(
        "throughput q/s", _fmt(report["throughput_qps"]), _fmt(floor["throughput_qps"]),
        _fmt(ratio["throughput"], "x"),
    )  # fmt: skip
    versus.add_row(
        "latency p50 ms", _fmt(report["latency_ms"]["p50"]), _fmt(floor["latency_ms"]["p50"]), ""
    )
    versus.add_row("nats-server CPU", "", "", _fmt(ratio.get("nats_cpu_per_request"), "x"))
    console.print(versus)


def print_ledger(report: dict[str, Any], console: Console) -> None:
    """Where a request's CPU went (`--profile`), by role, by layer and by part, beside the
    floor."""
    ledger = report.get("ledger")
    if not ledger:
        return
    floor_ms = ((report.get("ratio_to_floor") or {}).get("python_cpu_ms_per_request") or {}).get(
        "floor"
    )
    for key, title, column in (
        ("by_role", "role on the stack", "role"),
        ("by_layer", "innermost layer", "layer"),
        ("by_part", "part, against what the floor does", "part"),
    ):
        if key not in ledger:
            continue
        table = Table(title=f"a request's CPU by {title} ({ledger['samples']:,} samples)")
        table.add_column(column)
        table.add_column("share", justify="right")
        table.add_column("ms a request", justify="right")
        for row in ledger[key]:
            table.add_row(row["name"], f"{row['share']:.1%}", _fmt(row.get("ms_per_request")))
        if floor_ms:
            table.add_row("the floor, all of it", "", _fmt(floor_ms))
        console.print(table)
    kernel = (report.get("cpu") or {}).get("process_kernel_share") or {}
    ours = {name: share for name, share in kernel.items() if name.startswith("ragbus")}
    if ours:
        shares = ", ".join(f"{name} {share:.0%}" for name, share in ours.items())
        console.print(
            f"in the kernel, by /proc: {shares} of each process's CPU (py-spy samples Python "
            "frames, and files a thread inside a send or a wait under the frame that called it)"
        )
