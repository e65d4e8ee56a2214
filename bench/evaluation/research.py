"""`ragbus bench-research`: does research mode earn its cost on multi-hop questions?

Every question of a BEIR split with reference answers (MuSiQue train-100) is asked twice
through the running API, as a normal request and in `mode: "research"`, and each answer is
scored on:
- `answer_found`: the answer contains one of the reference answers (case and spacing aside);
- `cited_recall`: the share of the question's supporting documents among everything the
  answer cites (a report cites more than an answer: that is its point, and its cost is the
  next two figures);
- `latency_ms` (p50, p95, mean) and, for research, the child requests per question.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import mean, median, quantiles
from typing import Any

from bench.evaluation.beir import BeirSet
from bench.evaluation.critic_loop import answer_hit
from client import RagbusClient

MODES = ("answer", "research")


@dataclass
class Outcome:
    answer_found: float | None
    cited_recall: float
    cited: int
    latency_ms: float
    children: int


@dataclass
class ResearchRun:
    outcomes: dict[str, dict[str, Outcome]] = field(
        default_factory=lambda: {mode: {} for mode in MODES}
    )
    failures: dict[str, str] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"failed": len(self.failures), "failures": dict(self.failures)}
        for mode, outcomes in self.outcomes.items():
            values = list(outcomes.values())
            latencies = sorted(o.latency_ms for o in values)
            found = [o.answer_found for o in values if o.answer_found is not None]
            cuts = quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else None
            out[mode] = {
                "questions": len(values),
                "answer_found": round(mean(found), 4) if found else None,
                "cited_recall": round(mean(o.cited_recall for o in values), 4) if values else None,
                "cited_documents_mean": round(mean(o.cited for o in values), 2) if values else None,
                "latency_ms": {
                    "p50": round(median(latencies), 1) if latencies else None,
                    "p95": round(cuts[94], 1) if cuts else None,
                    "mean": round(mean(latencies), 1) if latencies else None,
                },
                "children_mean": round(mean(o.children for o in values), 2) if values else None,
            }
        return out


async def _ask(
    client: RagbusClient, query: str, namespace: str, mode: str, timeout_s: float
) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    submitted = await client.submit(query, namespaces=[namespace], mode=mode)
    rid = submitted["request_id"]
    async for message in client.stream_events(rid):
        if message.event == "done":
            break
        if time.perf_counter() - started > timeout_s:
            raise TimeoutError(f"{mode} request {rid} did not end within {timeout_s:g}s")
    view = await client.status(rid)
    elapsed = (time.perf_counter() - started) * 1000
    if view["status"] != "completed" or not view.get("answer"):
        raise RuntimeError(f"{mode} request {rid} ended {view['status']}")
    return view, elapsed


async def run_research(
    client: RagbusClient,
    beir: BeirSet,
    namespace: str,
    *,
    concurrency: int = 2,
    timeout_s: float = 600.0,
    progress: Callable[[], None] | None = None,
) -> ResearchRun:
    result = ResearchRun()
    gate = asyncio.Semaphore(concurrency)

    async def one(qid: str, query: str) -> None:
        async with gate:
            for mode in MODES:
                try:
                    view, elapsed = await _ask(client, query, namespace, mode, timeout_s)
                except Exception as exc:  # one failed question must not sink the benchmark
                    result.failures[f"{qid}:{mode}"] = f"{type(exc).__name__}: {exc}"[:300]
                    continue
                answer = view["answer"]
                cited = {c["document_id"] for c in answer["citations"].values()}
                wanted = {doc for doc, grade in beir.qrels.get(qid, {}).items() if grade > 0}
                references = beir.answers.get(qid)
                result.outcomes[mode][qid] = Outcome(
                    answer_found=answer_hit(answer["content"], references) if references else None,
                    cited_recall=len(wanted & cited) / len(wanted) if wanted else 0.0,
                    cited=len(cited),
                    latency_ms=elapsed,
                    children=len(view.get("children") or []),
                )
            if progress:
                progress()

    await asyncio.gather(*(one(qid, q) for qid, q in beir.queries.items()))
    return result
