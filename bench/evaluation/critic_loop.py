"""Does the critic's retry earn its cost? Asks a BEIR split through the full agentic loop and
compares, for every request the critic sent round again, its first attempt with its last:
retrieval recall against the qrels (at the first attempt's depth), whether the answer holds a
reference answer (for sets that have them), the critic's support scores, and the time it cost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import mean
from typing import Any

from bench.evaluation.beir import BeirSet
from client import RagbusClient


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


def answer_hit(answer: str, references: list[str]) -> float:
    """1.0 when the answer contains one of the reference answers (case and spacing aside)."""
    text = " ".join(answer.lower().split())
    return float(any(" ".join(ref.lower().split()) in text for ref in references if ref.strip()))


def _avg(values: list[float]) -> float | None:
    return round(mean(values), 4) if values else None


Measure = Callable[[str, LoopOutcome, int], float | None]
"""(query id, outcome, attempt index) -> the attempt's value, None when it has none."""


def _measures(beir: BeirSet) -> dict[str, Measure]:
    def recall(qid: str, outcome: LoopOutcome, index: int) -> float:
        """Both attempts cut to the first one's depth: more contexts alone must not count."""
        depth = len(outcome.attempts[0].get("documents", [])) or 10
        documents = outcome.attempts[index].get("documents", [])
        return recall_at(documents, beir.qrels.get(qid, {}), k=depth)

    def hit(qid: str, outcome: LoopOutcome, index: int) -> float | None:
        if qid not in beir.answers:
            return None
        return answer_hit(str(outcome.attempts[index].get("answer", "")), beir.answers[qid])

    def score(name: str) -> Measure:
        return lambda _q, outcome, index: outcome.attempts[index].get("scores", {}).get(name)

    return {
        "recall@first_depth": recall,
        "answer_hit": hit,
        "grounding": score("grounding"),
        "coverage": score("coverage"),
        "retrieval": score("retrieval"),
        "confidence": lambda _q, outcome, index: outcome.attempts[index].get("confidence"),
    }


def _first_vs_last(
    outcomes: dict[str, LoopOutcome], measures: dict[str, Measure]
) -> dict[str, Any]:
    """Each measure's mean over the first and the last attempts, and how many rose or fell."""
    out: dict[str, Any] = {"n": len(outcomes)}
    for name, measure in measures.items():
        pairs = [(measure(q, o, 0), measure(q, o, -1)) for q, o in outcomes.items()]
        known = [(a, b) for a, b in pairs if a is not None and b is not None]
        if not known:
            continue
        out[name] = {
            "first": _avg([a for a, _ in known]),
            "last": _avg([b for _, b in known]),
            "rose": sum(b > a for a, b in known),
            "fell": sum(b < a for a, b in known),
        }
    return out


def summarise(run: LoopRun, beir: BeirSet) -> dict[str, Any]:
    """First vs last attempt of the retried requests: all of them, per strategy, and those
    whose first attempt missed a relevant document (the weak ones the retry is for)."""
    measures = _measures(beir)
    retried = {q: o for q, o in run.outcomes.items() if len(o.attempts) >= 2}
    single = {q: o for q, o in run.outcomes.items() if len(o.attempts) < 2}
    by_strategy: dict[str, dict[str, LoopOutcome]] = {}
    for qid, outcome in retried.items():
        strategy = str(outcome.attempts[0].get("strategy"))
        by_strategy.setdefault(strategy, {})[qid] = outcome
    recall = measures["recall@first_depth"]
    weak = {q: o for q, o in retried.items() if (recall(q, o, 0) or 0.0) < 1.0}
    return {
        "queries": len(run.outcomes) + len(run.failures),
        "failed": len(run.failures),
        "retried": len(retried),
        # every request, a single attempt counting as its own last: what callers got
        "all_first_vs_last": _first_vs_last(run.outcomes, measures),
        "retried_first_vs_last": _first_vs_last(retried, measures),
        "weak_first_attempts": _first_vs_last(weak, measures),
        "by_strategy": {
            name: _first_vs_last(group, measures) for name, group in sorted(by_strategy.items())
        },
        "latency_ms": {
            "single_attempt_mean": _avg([o.latency_ms for o in single.values()]),
            "retried_mean": _avg([o.latency_ms for o in retried.values()]),
        },
    }


def attempts(answer: dict[str, Any]) -> list[dict[str, Any]] | None:
    """An answer event's attempts, each with its draft: the final attempt's is the event's
    `content`, which the event does not repeat in its history."""
    history = answer.get("metadata", {}).get("attempt_history")
    if not history:
        return None
    if "answer" not in history[-1]:
        history = [*history[:-1], {**history[-1], "answer": answer.get("content", "")}]
    return list(history)


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
                        history = attempts(message.data["data"])
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
