"""`ragbus bench-scale`: search and end-to-end latency at about 10k, 100k and 300k chunks.

`bench.scale_build` makes each corpus from an ingested namespace (perturbed copies: its
docstring says why, `bench.scale_copies`'s how). `measure` serves such a data directory with
`ragbus up` in a child process, on its own nats-server and redis-server (free ports, temporary
storage), and drives it with `ragbus bench`'s closed loop (`bench.load.run_bench`); `table`
renders one row per size, printed and saved in the report (`results/scale.json`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import scale_profile
from bench.cpu import API_PROCESS, REPLICA_PROCESS, STORES_PROCESS
from bench.load import REQUEST_TIMEOUT_S, run_bench, run_one
from bench.scale_build import SCALE_FILE, STACK_LOG
from bench.scale_source import read_json
from bench.stack import child_pids, replicas_serving, served_stack, stack_pids
from client import RagbusClient
from contracts.enums import CHANNEL_PHASE, Channel
from infra.retrieval.vectors.edge import CONFIG_FILE
from infra.threads import available_memory

READY_TIMEOUT_S = 900.0
"""A 300k-chunk stack loads a graph snapshot of some hundreds of MB before it is ready."""
PRIME_ATTEMPTS = 5
PRIME_PHASES = tuple(
    CHANNEL_PHASE[c].value for c in (Channel.VECTOR, Channel.SPARSE, Channel.GRAPH_LOCAL)
)


# =========================================================================== measuring


def _status_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the peak) of a process in kB, from /proc (none where it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    found: dict[str, int] = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0])
    return found


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    for child in child_pids(pid):
        found += [child, *_descendants(child)]
    return found


def memory_mb(pids: dict[str, int]) -> dict[str, Any]:
    """Resident memory of the stack's processes, read while it still serves: each named one's
    now (`rss`) and at its peak (`peak`), in MB, and `all`, the resident memory of every
    process of the stack (the worker's own children, which encode and detect communities,
    included) and of its servers."""
    every = set(pids.values()) | {d for pid in pids.values() for d in _descendants(pid)}
    status = {pid: _status_kb(pid) for pid in every}
    named = {
        name: {"rss": kb.get("VmRSS", 0) / 1024, "peak": kb.get("VmHWM", 0) / 1024}
        for name, pid in pids.items()
        if (kb := status[pid])
    }
    total = sum(kb.get("VmRSS", 0) for kb in status.values()) / 1024
    return {
        "processes": {
            name: {key: round(value, 1) for key, value in sizes.items()}
            for name, sizes in named.items()
        },
        "all": round(total, 1),
    }


def channel_latencies(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each search channel's p50 / p95 / count from a `run_bench` report's phases."""
    phases = report.get("phases") or {}
    found: dict[str, dict[str, Any]] = {}
    for channel, phase in CHANNEL_PHASE.items():
        stats = phases.get(phase.value)
        if stats:
            found[channel.value] = {
                "p50_ms": stats.get("p50_ms"),
                "p95_ms": stats.get("p95_ms"),
                "count": stats.get("count", 0),
            }
    return found


def _corpus_dir(out_data_dir: Path, namespace: str) -> Path:
    resolved = Path(out_data_dir).resolve()
    if not (resolved / "vectors" / namespace / CONFIG_FILE).exists():
        raise FileNotFoundError(f"no corpus for namespace {namespace!r} in {resolved}")
    return resolved


async def _prime(
    url: str, queries: Sequence[str], namespace: str, timeout_s: float
) -> dict[str, Any]:
    """Ask until one request has come back with every local search channel done: the stores
    and models load on first use, which no measured request should pay for (nor the warm-up,
    whose requests have the normal timeout)."""
    started = time.perf_counter()
    outcome = None
    async with RagbusClient(url) as client:
        for attempt in range(PRIME_ATTEMPTS):
            outcome = await run_one(
                client, queries[attempt % len(queries)], max(timeout_s, READY_TIMEOUT_S), namespace
            )
            done = {name for name, _ in outcome.phases}
            if outcome.status == "completed" and done.issuperset(PRIME_PHASES):
                break
    return {
        "seconds": round(time.perf_counter() - started, 3),
        "status": outcome.status if outcome else None,
        "phases": dict(outcome.phases) if outcome else {},
        "error": outcome.error if outcome else None,
    }


async def measure(
    out_data_dir: Path,
    queries: Sequence[str],
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    namespace: str,
    timeout_s: float = REQUEST_TIMEOUT_S,
    extra_env: dict[str, str] | None = None,
    profile: bool = False,
    replicas: int = 0,
) -> dict[str, Any]:
    """Serve `out_data_dir` with `ragbus up` (own nats-server and redis-server on free ports,
    temporary storage; the stack's log in `out_data_dir/bench-scale-stack.log`), wait for
    /readyz, ask until the stores and models are loaded, then run `ragbus bench`'s closed loop
    on `namespace`. Returns the `run_bench` report plus `channels` (per search channel p50 /
    p95), `ready_s`, `first_request` and `corpus` (the build's `scale.json`); with `profile`,
    `profile` (`bench.scale_profile`: the stores' process's GIL by work, the API's CPU)."""
    out_data_dir = _corpus_dir(out_data_dir, namespace)
    if not queries:
        raise ValueError("no queries")
    env = {
        "RAGBUS_API_TOKEN": "",
        "RAGBUS_QDRANT_URL": "",  # the embedded stores this corpus was written for
        "RAGBUS_NEO4J_URI": "",
        # one tenant asks as fast as the stack answers: its submission quota (50 a second by
        # default) would cap a fast run and answer the rest with a 429 each
        "RAGBUS_QUOTA_REQUESTS_PER_S": "0",
        "RAGBUS_SEARCH_REPLICAS": str(replicas),
        **(extra_env or {}),
    }
    started = time.perf_counter()
    async with served_stack(
        ["-m", "cli", "up"],
        env,
        ready_timeout_s=READY_TIMEOUT_S,
        data_dir=out_data_dir,
        log_path=out_data_dir / STACK_LOG,
    ) as stack:
        ready_s = time.perf_counter() - started
        first = await _prime(stack.url, queries, namespace, timeout_s)
        replicas_s = (
            await replicas_serving(stack.nats_url, replicas, READY_TIMEOUT_S) if replicas else None
        )
        # the replicas, as they are once serving (one restarted meanwhile has a new PID)
        pids = {**stack.pids, **stack_pids(stack.pids[API_PROCESS])}
        stack = dataclasses.replace(stack, pids=pids)
        sampling = (
            scale_profile.start(stack.pids, warmup_s=warmup_s, duration_s=duration_s)
            if profile
            else None
        )
        report = await run_bench(
            stack.url,
            queries,
            concurrency=concurrency,
            duration_s=duration_s,
            warmup_s=warmup_s,
            timeout_s=timeout_s,
            pids=stack.pids,
            namespace=namespace,
        )
        report["memory_mb"] = memory_mb(stack.pids)
        if sampling is not None:
            report["profile"] = scale_profile.summarise(await sampling, report)
    report["channels"] = channel_latencies(report)
    report["ready_s"] = round(ready_s, 3)
    report["search_replicas"] = replicas
    report["replicas_ready_s"] = None if replicas_s is None else round(replicas_s, 3)
    report["first_request"] = first
    report["namespace"] = namespace
    report["corpus"] = read_json(out_data_dir / SCALE_FILE)
    report["stack"] = "ragbus up (embedded Edge shard and graph), nats-server, redis-server"
    return report


# =========================================================================== the table


def size_label(chunks: int) -> str:
    """10000 -> "10k", 300000 -> "300k", 1500000 -> "1.5M"."""
    if chunks >= 1_000_000:
        return f"{chunks / 1_000_000:.3g}M"
    if chunks >= 1_000:
        return f"{chunks / 1_000:.3g}k"
    return str(chunks)


def _ms(value: Any) -> str:
    return "–" if value is None else f"{float(value):,.1f}"


def _count(value: Any) -> str:
    return "–" if value is None else f"{int(value):,}"


TABLE_CHANNELS = (Channel.VECTOR, Channel.SPARSE, Channel.GRAPH_LOCAL)


def _cost(row: dict[str, Any]) -> list[str]:
    """CPU a request of the API's process and of the stores' process (and of its search
    replicas, after a +), the cores the stack kept busy, and the resident memory of the
    stores' process with its replicas and of the whole stack."""
    cpu = row.get("cpu") or {}
    per = cpu.get("process_cpu_ms_per_request") or {}
    busy = cpu.get("server_cores_busy")
    memory = row.get("memory_mb") or {}
    processes = memory.get("processes") or {}
    replicas = [name for name in per if name.startswith(REPLICA_PROCESS)]
    stores = _ms(per.get(STORES_PROCESS))
    if replicas:
        stores += " + " + " + ".join(_ms(per.get(name)) for name in replicas)
    resident = [(processes.get(name) or {}).get("rss") for name in (STORES_PROCESS, *replicas)]
    every = memory.get("all")
    return [
        f"{_ms(per.get(API_PROCESS))} / {stores}",
        "–" if busy is None else f"{float(busy):.2f}",
        f"{_gb(sum(resident) if None not in resident else None)} / {_gb(every)}",
    ]


def _gb(mb: Any) -> str:
    return "–" if mb is None else f"{float(mb) / 1024:.1f}"


def table(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table, one line per corpus size. A row is a `measure` report (its `corpus`
    gives chunks, entities and the target size) or anything with the same keys; `size`,
    `chunks` and `entities` at the top of a row win over the corpus's."""
    header = [
        "size",
        "chunks",
        "entities",
        *(f"{channel.value} p50 / p95 ms" for channel in TABLE_CHANNELS),
        "e2e p50 ms",
        "e2e p95 ms",
        "q/s",
        "CPU ms a request: API / stores",
        "cores busy",
        "memory GB: stores / all",
    ]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    for row in rows:
        corpus = row.get("corpus") or {}
        chunks = row.get("chunks", corpus.get("chunks"))
        target = corpus.get("target_chunks") or chunks
        size = row.get("size") or (size_label(int(target)) if target else "–")
        if row.get("search_replicas"):
            size = f"{size}, {row['search_replicas']} replica(s)"
        channels = row.get("channels") or channel_latencies(row)
        latency = row.get("latency_ms") or {}
        qps = row.get("throughput_qps")
        cells = [
            str(size),
            _count(chunks),
            _count(row.get("entities", corpus.get("entities"))),
            *(
                f"{_ms((channels.get(c.value) or {}).get('p50_ms'))} / "
                f"{_ms((channels.get(c.value) or {}).get('p95_ms'))}"
                for c in TABLE_CHANNELS
            ),
            _ms(latency.get("p50")),
            _ms(latency.get("p95")),
            "–" if qps is None else f"{float(qps):.2f}",
            *_cost(row),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def ratios(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Each size against the first one measured in the same run (the issue's goals are
    ratios: throughput at the largest ≥ 0.8× the smallest's, p95 ≤ 1.5×): q/s, p95 and the
    stores' process's CPU a request, as multiples of the first row's."""
    if not rows:
        return {}
    first = rows[0]

    def ratio(row: dict[str, Any], value: Any) -> float | None:
        mine, theirs = value(row), value(first)
        return round(float(mine) / float(theirs), 3) if mine and theirs else None

    def stores_cpu(row: dict[str, Any]) -> Any:
        return ((row.get("cpu") or {}).get("process_cpu_ms_per_request") or {}).get(STORES_PROCESS)

    return {
        str(row.get("size")): {
            "throughput": ratio(row, lambda r: r.get("throughput_qps")),
            "p95": ratio(row, lambda r: (r.get("latency_ms") or {}).get("p95")),
            "stores_cpu_per_request": ratio(row, stores_cpu),
        }
        for row in rows[1:]
    }


MEMORY_HEADROOM = 0.9
"""Of the memory the machine has available, what a size's estimate may take."""


def available_mb() -> float | None:
    """The machine's MemAvailable in MB (None where /proc/meminfo is not)."""
    available = available_memory()
    return None if available is None else available / 2**20


def memory_needed_mb(rows: Sequence[dict[str, Any]], target_chunks: int) -> float | None:
    """The whole stack's memory at `target_chunks`, on the line through the two largest sizes
    measured so far in this run (a part of it is the same at any size: the interpreter, the
    models; the rest grows with the chunks: the graph, the shard's caches); None before two."""
    measured = sorted(
        (int((row.get("corpus") or {}).get("chunks") or 0), float(mb))
        for row in rows
        if (mb := (row.get("memory_mb") or {}).get("all"))
    )
    known = [(chunks, mb) for chunks, mb in measured if chunks]
    if len(known) < 2 or known[-1][0] == known[-2][0]:
        return None
    (c1, m1), (c2, m2) = known[-2], known[-1]
    per_chunk = max((m2 - m1) / (c2 - c1), 0.0)
    return max(m2 + per_chunk * (target_chunks - c2), m2)


def too_big(rows: Sequence[dict[str, Any]], target_chunks: int) -> str | None:
    """Why `target_chunks` is not measured on this machine (its estimate past what is
    available), or None: a size is left out, not let run the machine out of memory."""
    needed, free = memory_needed_mb(rows, target_chunks), available_mb()
    if needed is None or free is None or needed <= free * MEMORY_HEADROOM:
        return None
    return (
        f"needs about {needed / 1024:.1f} GB (on the line through the two largest sizes measured), "
        f"{free / 1024:.1f} GB available"
    )
