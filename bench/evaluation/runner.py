"""Runs every query of a BEIR split through the live pipeline (HTTP, `mode=retrieve`).

Each query is a real request: classify, the four channels, fusion — the same path a
user's question takes — so the figures measure the system, not a side path.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median, quantiles
from typing import Any

from bench.evaluation.beir import BeirSet
from bench.evaluation.metrics import Run, document_run, evaluate, paired_difference
from client import RagbusClient

DENSE_SPARSE_WEIGHTS = {"vector": 0.55, "sparse": 0.35}
"""The reliability prior's weights for the two text channels
(`infra.retrieval.intent_profiles.PRIOR`)."""
RRF_K = 60

CHANNEL_PHASES = ("vector_search", "sparse_search", "graph_local_search", "graph_global_search")


@dataclass
class EvalRun:
    fused: Run = field(default_factory=dict)
    channels: dict[str, Run] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    phase_ms: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each query's intent, weights and chunk rankings as the answer carried them
    (`--requests-out`): what `studies.fusion_study` fuses again offline."""

    def dense_sparse(self) -> Run:
        """Weighted RRF (k = 60) of the vector and sparse document rankings alone."""
        fused: Run = {}
        for channel, weight in DENSE_SPARSE_WEIGHTS.items():
            for qid, ranking in self.channels.get(channel, {}).items():
                ordered = sorted(ranking, key=lambda doc: (-ranking[doc], doc))
                scores = fused.setdefault(qid, {})
                for position, doc in enumerate(ordered, start=1):
                    scores[doc] = scores.get(doc, 0.0) + weight / (RRF_K + position)
        return fused

    def report(self, beir: BeirSet) -> dict[str, Any]:
        qrels = beir.qrels
        lat = sorted(self.latencies_ms)
        cuts = quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else lat * 99
        dense_sparse = self.dense_sparse()
        return {
            "queries": len(qrels),
            "failed": len(self.failures),
            "failures": dict(sorted(self.failures.items())[:20]),
            "fused": evaluate(qrels, self.fused),
            "channels": {name: evaluate(qrels, run) for name, run in sorted(self.channels.items())},
            # what fusion without the graph would give, from the same requests' channel runs
            "baselines": {"vector+sparse": evaluate(qrels, dense_sparse)},
            # the fused ranking against it query by query: the difference and how sure it is
            "fused_against": {"vector+sparse": paired_difference(qrels, self.fused, dense_sparse)},
            "latency_ms": {
                "p50": round(median(lat), 1) if lat else None,
                "p95": round(cuts[94], 1) if lat else None,
                "mean": round(sum(lat) / len(lat), 1) if lat else None,
            },
            "phase_p50_ms": {
                phase: round(median(values), 2) for phase, values in sorted(self.phase_ms.items())
            },
        }


async def _one(
    client: RagbusClient, qid: str, query: str, namespace: str, top_k: int, result: EvalRun
) -> None:
    started = time.perf_counter()
    submitted = await client.submit(query, namespaces=[namespace], top_k=top_k, mode="retrieve")
    retrieval: dict[str, Any] | None = None
    answer: dict[str, Any] | None = None
    status = "unknown"
    async for message in client.stream_events(submitted["request_id"]):
        data = message.data.get("data", {})
        if message.event == "phase" and data.get("status") == "completed":
            if data.get("duration_ms") is not None:
                result.phase_ms.setdefault(data["phase"], []).append(float(data["duration_ms"]))
        elif message.event == "answer":
            answer = data.get("metadata", {})
            retrieval = answer.get("retrieval")
        elif message.event == "done":
            status = data.get("status", "unknown")
    if status != "completed" or retrieval is None or answer is None:
        result.failures[qid] = status
        return
    result.requests[qid] = {
        "query": query,
        "intent": answer.get("intent"),
        "intent_confidence": answer.get("intent_confidence"),
        "weights": answer.get("weights"),
        "retrieval": retrieval,
    }
    result.latencies_ms.append((time.perf_counter() - started) * 1000)
    result.fused[qid] = document_run(retrieval["fused"])
    for channel, ranking in retrieval["channels"].items():
        result.channels.setdefault(channel, {})[qid] = document_run(ranking)


async def run_queries(
    client: RagbusClient,
    beir: BeirSet,
    namespace: str,
    *,
    concurrency: int = 4,
    top_k: int = 100,
    progress: Callable[[], None] | None = None,
) -> EvalRun:
    result = EvalRun()
    gate = asyncio.Semaphore(concurrency)

    async def one(qid: str, query: str) -> None:
        async with gate:
            try:
                await _one(client, qid, query, namespace, top_k, result)
            except Exception as exc:  # one broken query must not sink the evaluation
                result.failures[qid] = f"{type(exc).__name__}: {exc}"
            if progress:
                progress()

    await asyncio.gather(*(one(qid, q) for qid, q in beir.queries.items()))
    return result
