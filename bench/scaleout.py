"""`ragbus bench-scaleout`: do the stateless roles scale by adding processes?

On a three-node JetStream cluster (every stream on three nodes) and one redis-server, each
role runs in processes of its own, as a deployment would run them: the API, the store-owning
worker (search, fuse, tool and ingest share the embedded stores, so they are one process),
and the stateless roles, orchestrator, classify, generate and critic. The sample corpus is
ingested once; then the same closed-loop load (`bench.load.run_bench`) runs with 1 process of
each stateless role, and again after a second process of each has joined its delivery group.
The report gives q/s, latency and CPU a request for each, and each role's share of the CPU,
which says where the next bottleneck is.

Every process is told how many share the machine (`RAGBUS_HOST_PROCESSES`), so their thread
pools together fit the cores.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from bench.chaos_cluster import Cluster, boot
from bench.load import run_bench

STATELESS = ("orchestrator", "classify", "generate", "critic")
ARGS = {
    "orchestrator": ["orchestrator"],
    "classify": ["worker", "classify"],
    "generate": ["worker", "generate"],
    "critic": ["worker", "critic"],
}
JOIN_WAIT_S = 45.0
"""How long the second processes get to load their models and join before the load starts."""
BENCH_ENV = {
    # The chaos settings' long deadlines stay (nothing is killed here, so none fires), but a
    # step is redelivered sooner than the chaos run allows if a process is slow to start.
    "RAGBUS_ACK_WAIT_S": "30",
}


def scale_roles(processes: int) -> dict[str, tuple[list[str], int]]:
    return {
        "api": (["api"], 1),
        "stores": (["worker", "search", "fuse", "tool", "ingest"], 1),
        **{role: (ARGS[role], processes) for role in STATELESS},
    }


def role_pids(cluster: Cluster) -> dict[str, int]:
    return {
        f"{name}-{index + 1}": process.pid
        for name, role in cluster.roles.items()
        for index, process in enumerate(role.processes)
        if process is not None and process.poll() is None
    }


def add_process(cluster: Cluster, name: str) -> None:
    role = cluster.roles[name]
    role.processes.append(None)
    cluster.spawn(role, len(role.processes) - 1)


def summary(report: dict[str, Any], processes: int) -> dict[str, Any]:
    """The figures of one load run that the table shows, and where its CPU went by role."""
    cpu = report.get("cpu") or {}
    by_process = cpu.get("process_cpu_ms_per_request") or {}
    by_role: dict[str, float] = {}
    for name, ms in by_process.items():
        role = name.rsplit("-", 1)[0]
        by_role[role] = round(by_role.get(role, 0.0) + ms, 2)
    latency = report.get("latency_ms") or {}
    return {
        "processes_per_stateless_role": processes,
        "throughput_qps": report.get("throughput_qps"),
        "latency_ms": {"p50": latency.get("p50"), "p95": latency.get("p95")},
        "cpu_ms_per_request": cpu.get("server_cpu_ms_per_request"),
        "server_cores_busy": cpu.get("server_cores_busy"),
        "cpu_ms_per_request_by_role": dict(sorted(by_role.items(), key=lambda kv: -kv[1])),
        "errors": report.get("errors"),
        "unfinished": report.get("unfinished"),
    }


async def bench_scaleout(
    queries: list[str],
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    nats_nodes: int = 3,
    processes: tuple[int, ...] = (1, 2),
) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ragbus-scaleout-") as tmp:
        cluster = Cluster(
            Path(tmp), nats_nodes=nats_nodes, roles=scale_roles(processes[0]), env=BENCH_ENV
        )
        try:
            await boot(cluster, seed_timeout_s=300)
            for count in processes:
                for name in STATELESS:
                    while len(cluster.roles[name].processes) < count:
                        add_process(cluster, name)
                if count > processes[0]:
                    await asyncio.sleep(JOIN_WAIT_S)
                report = await run_bench(
                    cluster.url,
                    queries,
                    concurrency=concurrency,
                    duration_s=duration_s,
                    warmup_s=warmup_s,
                    pids=role_pids(cluster),
                )
                runs.append({**summary(report, count), "report": report})
        finally:
            cluster.stop()
    first, last = runs[0], runs[-1]
    return {
        "nats_nodes": nats_nodes,
        "stream_replicas": min(3, nats_nodes),
        "concurrency": concurrency,
        "duration_s": duration_s,
        "corpus": "bench/sample",
        "runs": runs,
        "scaling": {
            "throughput_ratio": _ratio(last["throughput_qps"], first["throughput_qps"]),
            "p95_ratio": _ratio(last["latency_ms"]["p95"], first["latency_ms"]["p95"]),
        },
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None
