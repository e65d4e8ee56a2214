"""Does the critic's retry earn its cost? Asks a BEIR split through the full agentic loop and
compares, for every request the critic sent round again, its first attempt with its last:
retrieval recall against the qrels, the critic's support scores, and the time it cost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import mean
from typing import Any

from api.client import RagbusClient
from api.evaluation.beir import BeirSet, Qrels


@dataclass
class LoopOutcome:
    attempts: list[dict[str, Any]]
    latency_ms: float


@dataclass
class LoopRun:
    outcomes: dict[str, LoopOutcome] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)


def recall_at(documents: list[str], relevant: dict[str, int], k: int = 10) -> float:
    wanted = {doc for doc, grade in relevant.items() if grade > 0}
    return len(wanted & set(documents[:k])) / len(wanted) if wanted else 0.0


def _avg(values: list[float]) -> float | None:
    return round(mean(values), 4) if values else None


def summarise(run: LoopRun, qrels: Qrels) -> dict[str, Any]:
    retried = {q: o for q, o in run.outcomes.items() if len(o.attempts) >= 2}
    single = {q: o for q, o in run.outcomes.items() if len(o.attempts) < 2}

    def side(index: int, measure: Callable[[dict[str, Any], str], float | None]) -> float | None:
        values = [measure(o.attempts[index], q) for q, o in retried.items()]
        return _avg([v for v in values if v is not None])

    def recall(attempt: dict[str, Any], qid: str) -> float:
        return recall_at(attempt.get("documents", []), qrels.get(qid, {}))

    def score(name: str) -> Callable[[dict[str, Any], str], float | None]:
        return lambda attempt, _qid: attempt.get("scores", {}).get(name)

    def confidence(attempt: dict[str, Any], _qid: str) -> float | None:
        return attempt.get("confidence")

    comparison = {
        name: {"first": side(0, fn), "last": side(-1, fn)}
        for name, fn in {
            "recall@10": recall,
            "grounding": score("grounding"),
            "coverage": score("coverage"),
            "retrieval": score("retrieval"),
            "confidence": confidence,
        }.items()
    }
    improved = sum(
        1 for q, o in retried.items() if recall(o.attempts[-1], q) > recall(o.attempts[0], q)
    )
    worse = sum(
        1 for q, o in retried.items() if recall(o.attempts[-1], q) < recall(o.attempts[0], q)
    )
    strategies: dict[str, int] = {}
    for outcome in retried.values():
        strategy = str(outcome.attempts[0].get("strategy"))
        strategies[strategy] = strategies.get(strategy, 0) + 1
    return {
        "queries": len(run.outcomes) + len(run.failures),
        "failed": len(run.failures),
        "retried": len(retried),
        "strategies": strategies,
        "retried_first_vs_last": comparison,
        "recall_improved": improved,
        "recall_worse": worse,
        "latency_ms": {
            "single_attempt_mean": _avg([o.latency_ms for o in single.values()]),
            "retried_mean": _avg([o.latency_ms for o in retried.values()]),
        },
    }


async def run_loop(
    client: RagbusClient,
    beir: BeirSet,
    namespace: str,
    *,
    concurrency: int = 4,
    progress: Callable[[], None] | None = None,
) -> LoopRun:
    run = LoopRun()
    gate = asyncio.Semaphore(concurrency)

    async def one(qid: str, query: str) -> None:
        async with gate:
            started = time.perf_counter()
            try:
                submitted = await client.submit(query, namespaces=[namespace])
                history: list[dict[str, Any]] | None = None
                async for message in client.stream_events(submitted["request_id"]):
                    if message.event == "answer":
                        history = message.data["data"]["metadata"].get("attempt_history")
                if history:
                    elapsed = (time.perf_counter() - started) * 1000
                    run.outcomes[qid] = LoopOutcome(history, elapsed)
                else:
                    run.failures[qid] = "no answer"
            except Exception as exc:  # one broken query must not sink the benchmark
                run.failures[qid] = f"{type(exc).__name__}: {exc}"
            if progress:
                progress()

    await asyncio.gather(*(one(qid, q) for qid, q in beir.queries.items()))
    return run
