"""`ragbus bench-scale --profile`: what the process that owns the stores holds its GIL for, and
where the API's process spends its CPU, while a size is loaded.

The worker child owns the embedded stores and is the stack's ceiling under load (docs/bus.md →
The store-owning process's reads): what bounds it is the time it holds its GIL, not its CPU
(the encoder's threads run beside it). So it is sampled with py-spy's `--gil` (only the thread
holding the GIL is sampled), and each sample is filed by the store work on its stack
(`store_work`): each Edge call by what it is for, the graph's channels, fusion, the phase
events, the messaging layers. The share of the possible samples taken is how busy its GIL was;
a work's samples over the requests answered meanwhile are its GIL milliseconds a request, the
figure that grows with the corpus or does not. The API's process is filed by
`bench.ledger.ledger` (role, layer, part), in milliseconds of its CPU a request.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from typing import Any

from bench.cpu import API_PROCESS, REPLICA_PROCESS, STORES_PROCESS
from bench.ledger import ledger, record, samples

RATE_HZ = 50
"""py-spy's samples a second: enough for shares of a percent over 25 s, little overhead."""

STORE_WORK: tuple[tuple[str, tuple[str, ...]], ...] = (
    # (name, every function that must be on the stack), first match wins: the most specific
    ("Edge: the feedback search, sparse", ("search_again", "search_sparse")),
    ("Edge: the feedback search, dense", ("search_again", "search_dense")),
    ("Edge: the sparse channel", ("search_sparse",)),
    ("Edge: the dense channel", ("search_dense",)),
    ("Edge: completion scores", ("_scores",)),
    ("Edge: hydration", ("hydrate",)),
    ("Edge: passages for feedback", ("passages",)),
    ("graph: the fusion's bridge", ("bridge", "local_search")),
    ("graph: global search", ("global_search",)),
    ("graph: local search", ("local_search",)),
    ("fusion and feedback (their own code)", ("fuse_rankings",)),
    ("classification", ("classify_first",)),
    ("phase events", ("phase",)),
    ("handing commands to a search replica", ("hand_off",)),
    ("a replica taking a command", ("take_task",)),
)
EDGE_OTHER = "Edge: other calls"
MESSAGING = "messaging, contracts and the consume path"
OTHER = "the rest of the search worker"


def store_work(frames: list[tuple[str, str]]) -> str:
    """What a sample of the stores' process was doing, by the functions on its stack."""
    functions = {function.rsplit(".", 1)[-1] for function, _ in frames}
    for name, needed in STORE_WORK:
        if all(function in functions for function in needed):
            return name
    paths = [path for _, path in frames]
    if any(path.startswith("infra/retrieval/vectors/") for path in paths):
        return EDGE_OTHER
    if not any(path.startswith(("workers/", "engines/")) for path in paths):
        return MESSAGING
    return OTHER


def gil_ledger(lines: Iterable[str], seconds: float, requests: int) -> dict[str, Any]:
    """`--gil` samples of one process filed by `store_work`: how busy its GIL was (the share
    of the `RATE_HZ` samples a second it was held) and each work's GIL ms a request."""
    by_work: Counter[str] = Counter()
    total = 0
    for frames, count in samples(lines):
        total += count
        by_work[store_work(frames)] += count
    per_sample_ms = 1000 / RATE_HZ
    return {
        "samples": total,
        "gil_busy": round(total / max(seconds * RATE_HZ, 1), 3),
        "gil_ms_per_request": round(total * per_sample_ms / max(requests, 1), 2),
        "by_work": [
            {"name": name, "gil_ms_per_request": round(n * per_sample_ms / max(requests, 1), 2)}
            for name, n in by_work.most_common()
        ],
    }


def start(pids: dict[str, int], *, warmup_s: float, duration_s: float) -> asyncio.Task[Any]:
    """Sample the stores' process (`--gil`), its first search replica where it has one (also
    `--gil`) and the API's process side by side through the measured part of a run (after
    its warm-up, a second short of each end)."""
    seconds = max(duration_s - 2, 1)
    delay_s = warmup_s + 1

    async def each() -> dict[str, Any]:
        gil = [pids[STORES_PROCESS], *([pids[REPLICA_PROCESS]] if REPLICA_PROCESS in pids else [])]
        recorded = await asyncio.gather(
            record(pids[API_PROCESS], delay_s=delay_s, seconds=seconds, rate=RATE_HZ),
            *(record(pid, delay_s=delay_s, seconds=seconds, rate=RATE_HZ, gil=True) for pid in gil),
        )
        api, stores, *replica = recorded
        return {
            "seconds": round(seconds),
            "stores": stores,
            "api": api,
            **({"replica": replica[0]} if replica else {}),
        }

    return asyncio.create_task(each())


def summarise(recorded: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """The samples of `start` against the run's report: requests answered while sampling
    (its throughput times the seconds sampled) and the API process's CPU a request."""
    seconds = recorded["seconds"]
    requests = round((report.get("throughput_qps") or 0) * seconds)
    per_process = (report.get("cpu") or {}).get("process_cpu_ms_per_request") or {}
    return {
        "rate_hz": RATE_HZ,
        "seconds": seconds,
        "stores_gil": gil_ledger(recorded["stores"], seconds, requests),
        **(
            {"replica_gil": gil_ledger(recorded["replica"], seconds, requests)}
            if "replica" in recorded
            else {}
        ),
        "api_cpu": ledger(recorded["api"], per_process.get(API_PROCESS)),
    }
