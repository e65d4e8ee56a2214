"""`ragbus bench-conversations`: does a follow-up find its documents with the conversation?

Each conversation of a JSONL file (`bench/conversations.jsonl`: turns of `query`, the
`standalone` reference question, and the `relevant` document ids) is asked turn by turn in a
session of its own, through the running API, as a user would ask it: each turn in `answer`
mode, so the next one can lean on its answer ("Who founded it?" ... "Where was he born?").
Before a follow-up is answered, its retrieval is measured in `retrieve` mode three ways:
- `with_memory`: the follow-up as typed, in its session (made standalone by the pipeline);
- `without_memory`: the follow-up as typed, with no session;
- `standalone`: the reference standalone question, with no session: the ceiling.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.evaluation.beir import Qrels
from bench.evaluation.metrics import Run, document_run, evaluate
from client import RagbusClient

CONDITIONS = ("with_memory", "without_memory", "standalone")


@dataclass(frozen=True)
class Turn:
    query: str
    standalone: str
    relevant: list[str]


@dataclass(frozen=True)
class Conversation:
    id: str
    turns: list[Turn]


def load_conversations(path: Path) -> list[Conversation]:
    out: list[Conversation] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            turns = [Turn(t["query"], t["standalone"], list(t["relevant"])) for t in raw["turns"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: not a conversation ({exc})") from exc
        if len(turns) < 2:
            raise ValueError(f"{path}:{number}: a conversation needs a follow-up")
        out.append(Conversation(str(raw["id"]), turns))
    return out


@dataclass
class ConversationRun:
    runs: dict[str, Run] = field(default_factory=lambda: {c: {} for c in CONDITIONS})
    qrels: Qrels = field(default_factory=dict)
    methods: Counter[str] = field(default_factory=Counter)
    rewrites: list[dict[str, str]] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        return {
            "follow_ups": len(self.qrels),
            "failed": len(self.failures),
            "failures": dict(sorted(self.failures.items())[:20]),
            **{name: evaluate(self.qrels, self.runs[name]) for name in CONDITIONS},
            "rewrite_methods": dict(self.methods),
            "rewrites": self.rewrites,
        }


async def _retrieve(
    client: RagbusClient, query: str, namespace: str, session_id: str | None, top_k: int
) -> tuple[dict[str, float], dict[str, Any]]:
    """One request in `retrieve` mode: its document ranking and its answer's metadata."""
    submitted = await client.submit(
        query, namespaces=[namespace], top_k=top_k, mode="retrieve", session_id=session_id
    )
    metadata: dict[str, Any] | None = None
    status = "unknown"
    async for message in client.stream_events(submitted["request_id"]):
        data = message.data.get("data", {})
        if message.event == "answer":
            metadata = data.get("metadata") or {}
        elif message.event == "done":
            status = data.get("status", "unknown")
    if status != "completed" or metadata is None or "retrieval" not in metadata:
        raise RuntimeError(f"request ended {status}")
    return document_run(metadata["retrieval"]["fused"]), metadata


async def _answer(
    client: RagbusClient, query: str, namespace: str, session_id: str, timeout_s: float = 30.0
) -> None:
    """Ask a turn as the user does (`answer` mode), then wait until the session has its
    answer: the memory worker records it just after the request's `done`."""
    submitted = await client.submit(query, namespaces=[namespace], session_id=session_id)
    rid = submitted["request_id"]
    async for message in client.stream_events(rid):
        if message.event == "done":
            break
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        turns = (await client.session(session_id))["turns"]
        if any(t["request_id"] == rid and t["finished_at"] for t in turns):
            return
        await asyncio.sleep(0.1)


async def _converse(
    client: RagbusClient,
    conversation: Conversation,
    namespace: str,
    top_k: int,
    result: ConversationRun,
) -> None:
    session_id = f"bench-{conversation.id}-{uuid.uuid4().hex[:8]}"
    try:
        await _answer(client, conversation.turns[0].query, namespace, session_id)
        for index, turn in enumerate(conversation.turns[1:], start=1):
            qid = f"{conversation.id}#{index}"
            result.qrels[qid] = dict.fromkeys(turn.relevant, 1)
            started = time.perf_counter()
            ranked, metadata = await _retrieve(client, turn.query, namespace, session_id, top_k)
            result.latencies_ms.append((time.perf_counter() - started) * 1000)
            result.runs["with_memory"][qid] = ranked
            result.methods[str(metadata.get("rewrite_method"))] += 1
            result.rewrites.append(
                {
                    "id": qid,
                    "query": turn.query,
                    "made": str(metadata.get("standalone_query")),
                    "reference": turn.standalone,
                }
            )
            alone, _ = await _retrieve(client, turn.query, namespace, None, top_k)
            result.runs["without_memory"][qid] = alone
            ceiling, _ = await _retrieve(client, turn.standalone, namespace, None, top_k)
            result.runs["standalone"][qid] = ceiling
            if index < len(conversation.turns) - 1:  # the user's own turn, answered
                await _answer(client, turn.query, namespace, session_id)
    except Exception as exc:  # one broken conversation must not sink the benchmark
        result.failures[conversation.id] = f"{type(exc).__name__}: {exc}"
    finally:
        with contextlib.suppress(Exception):  # nothing to forget (the first turn failed)
            await client.forget_session(session_id)


async def run_conversations(
    client: RagbusClient,
    conversations: list[Conversation],
    namespace: str,
    *,
    concurrency: int = 4,
    top_k: int = 100,
    progress: Any = None,
) -> ConversationRun:
    result = ConversationRun()
    gate = asyncio.Semaphore(concurrency)

    async def one(conversation: Conversation) -> None:
        async with gate:
            await _converse(client, conversation, namespace, top_k, result)
            if progress:
                progress()

    await asyncio.gather(*(one(c) for c in conversations))
    result.rewrites.sort(key=lambda r: r["id"])
    return result
