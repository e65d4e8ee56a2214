"""What the chaos run checks once it is over, from the broker and the stores rather than from
the processes that were killed: every request reached a terminal status, none has two answers
or two `done` events in JetStream, no client's event stream missed an event that JetStream
holds (`verify_requests`); the ingest job indexed every document's chunks exactly, nothing
lost, nothing extra (`verify_ingest`)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import nats
from nats.js import JetStreamContext

from bench.chaos_clients import Tracked
from bench.chaos_cluster import Cluster
from bench.chaos_ingest import CHAOS_NAMESPACE, chaos_documents
from client import RagbusClient
from contracts import subjects as sj
from contracts.events import caller_events
from infra.retrieval.chunking import chunk_document

StoredEvents = Callable[[JetStreamContext, str], Awaitable[list[tuple[int, dict[str, Any]]]]]
"""Every caller event the stream holds for a request, with its sequence: the CLI hands in
`api.event_stream.stored_events` (bench takes nothing from the HTTP layer)."""
TERMINAL = frozenset({"completed", "failed", "timed_out", "cancelled"})
VERIFY_CONCURRENCY = 16
"""Requests checked at once: each read waits half a second of quiet after its last event."""
MISSED_LISTED = 20
"""Requests whose client stream missed an event, listed by id in the report at most."""
API_BACK_WITHIN_S = 60.0
"""How long a status read waits for the API to answer again: the supervisor starts a process
that exited on its own again while the checks run, and an API starts in a few seconds."""


async def _status(client: RagbusClient, request_id: str) -> dict[str, Any]:
    """A request's record, read through the API, waiting out an API the supervisor is starting
    again (a restart counts in the report's `crash_restarts`)."""
    deadline = time.monotonic() + API_BACK_WITHIN_S
    while True:
        try:
            return await client.status(request_id)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


def _describe(
    key: tuple[int, int], event: dict[str, Any], done_seq: int | None
) -> dict[str, object]:
    seq, part = key
    data = event.get("data") or {}
    return {
        "seq": seq,
        "part": part,
        "type": event.get("type"),
        "phase": data.get("phase"),
        "status": data.get("status"),
        "attempt": event.get("attempt"),
        "after_done": done_seq is not None and seq > done_seq,
    }


async def verify_requests(
    cluster: Cluster, tracked: Sequence[Tracked], read_events: StoredEvents
) -> dict[str, Any]:
    nc = await nats.connect(cluster.env["RAGBUS_NATS_URL"].split(","))
    duplicates = {"answers": 0, "done": 0}
    missing_streams, missing_events, after_done = 0, 0, 0
    statuses: Counter[str] = Counter()
    why_not: Counter[str] = Counter()
    missed: list[dict[str, object]] = []
    try:
        js = nc.jetstream()
        checking = asyncio.Semaphore(VERIFY_CONCURRENCY)

        async def check(client: RagbusClient, request: Tracked) -> None:
            nonlocal missing_streams, missing_events, after_done
            async with checking:
                state = await _status(client, request.request_id)
                events = await read_events(js, request.request_id)
            statuses[str(state["status"])] += 1
            if state["status"] != "completed":
                error = state.get("error") or {}
                why_not[f"{state['status']}: {error.get('code')} in {error.get('phase')}"] += 1
            # each event a caller is owed: a message's entries one by one (a `phases`
            # message's phase events, a `done` and the answer or error it carries)
            stored = {
                (seq, event.get("part", 0)): event
                for seq, body in events
                for event in caller_events(body)
            }
            kinds = Counter(str(event.get("type", "")) for event in stored.values())
            duplicates["answers"] += kinds["answer"] > 1
            duplicates["done"] += kinds["done"] > 1
            lost = set(stored) - request.seen if request.status != "unfinished" else set()
            # A stream ends at `done`: an event stored after it was published late (by a
            # step that outlived its request), which no reader of the stream is owed.
            done_seq = min((q for q, e in events if e.get("type") == "done"), default=None)
            late = {k for k in lost if done_seq is not None and k[0] > done_seq}
            missing_streams += bool(lost - late)
            missing_events += len(lost - late)
            after_done += len(late)
            if lost and len(missed) < MISSED_LISTED:
                missed.append(
                    {
                        "request_id": request.request_id,
                        "resumes": request.resumes,
                        "lost": [_describe(k, stored[k], done_seq) for k in sorted(lost)],
                        # what the client saw, to tell a reader that skipped an event from
                        # one that ended early on a `done` made from the record
                        "seen": sorted(request.seen),
                        "done_seen": request.done_seq,
                        "stored": [[q, e.get("type")] for q, e in events],
                    }
                )

        async with RagbusClient(cluster.url, timeout=30) as client:
            await asyncio.gather(*(check(client, request) for request in tracked))
        dead_letters = (await js.stream_info(sj.STREAM_DLQ)).state.messages
        dead_letter_kinds = await _dead_letter_kinds(js, {t.request_id: t for t in tracked})
    finally:
        await nc.close()
    return {
        "by_status": dict(statuses),
        "why_not_completed": dict(why_not),
        "streams_missing": missed,
        "terminal": sum(n for s, n in statuses.items() if s in TERMINAL),
        "duplicates": duplicates,
        "streams_missing_events": missing_streams,
        "events_missed": missing_events,
        "events_after_done": after_done,
        "dead_letters": dead_letters,
        "dead_letter_kinds": dead_letter_kinds,
    }


DEAD_LETTER_ERROR_CHARS = 120


async def _dead_letter_kinds(
    js: JetStreamContext, tracked: dict[str, Tracked]
) -> list[dict[str, Any]]:
    """Every dead letter, grouped by subject, reason and error, with how its request ended
    (from the client's view): what an operator paged by them would want to know first."""
    info = await js.stream_info(sj.STREAM_DLQ)
    kinds: Counter[tuple[str, str, str, str]] = Counter()
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        try:
            letter = json.loads((await js.get_msg(sj.STREAM_DLQ, seq)).data or b"{}")
        except Exception:  # a gap (deleted, aged out)
            continue
        request = tracked.get(str(letter.get("request_id")))
        kinds[
            (
                str(letter.get("original_subject")),
                str(letter.get("reason")),
                str(letter.get("error", ""))[:DEAD_LETTER_ERROR_CHARS],
                request.status if request is not None else "not a client's request",
            )
        ] += 1
    return [
        {"subject": subject, "reason": reason, "error": error, "request": status, "count": n}
        for (subject, reason, error, status), n in kinds.most_common()
    ]


def _stored_chunks(data_dir: Path, env: dict[str, str]) -> dict[str, set[str]]:
    """Chunk ids per document in the chaos namespace, read from the stores on disk once every
    process has stopped (in a child process, as a worker opens them)."""
    out = data_dir / "stored-chunks.json"
    code = (
        "import json, sys\n"
        "from infra.retrieval.vectors import open_vector_store\n"
        "from infra.settings import Settings\n"
        "store = open_vector_store(Settings(), 384)\n"
        "found = {}\n"
        f"for record in store.iter_points({CHAOS_NAMESPACE!r}):\n"
        "    doc, chunk = record.payload['document_id'], record.payload['chunk_id']\n"
        "    found.setdefault(doc, []).append(chunk)\n"
        "open(sys.argv[1], 'w').write(json.dumps(found))\n"
    )
    subprocess.run([sys.executable, "-c", code, str(out)], env=env, capture_output=True, check=True)
    return {doc: set(ids) for doc, ids in json.loads(out.read_text()).items()}


def verify_ingest(cluster: Cluster, job: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    documents = chaos_documents(job["documents"])
    expected = {d.id: {c.chunk_id for c in chunk_document(d)} for d in documents}
    stored = _stored_chunks(cluster.root / "data", cluster.env)
    lost = sum(len(ids - stored.get(doc, set())) for doc, ids in expected.items())
    extra = sum(len(ids - expected.get(doc, set())) for doc, ids in stored.items())
    return {
        "documents": len(documents),
        "job_status": record.get("status"),
        "documents_done": record.get("documents_done"),
        # a document indexed before its process was killed, and found already indexed when
        # its message came again, counts as unchanged: indexed once, counted once
        "documents_unchanged": record.get("documents_unchanged"),
        "documents_failed": record.get("documents_failed"),
        "chunks_expected": sum(len(ids) for ids in expected.values()),
        "chunks_counted_by_job": record.get("chunks"),
        "chunks_lost": lost,
        "chunks_extra": extra,
        "documents_lost": sum(1 for doc in expected if not stored.get(doc)),
    }
