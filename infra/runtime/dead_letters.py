"""Dead letters: a message that will never be processed is copied to `rag.dlq.<subject>` with
the reason, and the saga is told that its step failed.

Two ways a message gets here:
- a handler gave up on it (malformed, a bug, retries exhausted: `worker_runtime.error_policy`);
- JetStream gave up delivering it: `max_deliver` deliveries went unacknowledged because the
  worker holding it died or hung each time. The handler never finished, so only the broker
  knows. It says so in a `MAX_DELIVERIES` advisory, which `RAG_ADVISORIES` keeps; the
  orchestrator consumes it (`handle_max_deliveries`), dead-letters the message, reports the
  failure and removes the message from its work queue, where it would otherwise stay forever.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

import nats.js.errors
from nats.js import JetStreamContext
from pydantic import ValidationError

from contracts import subjects as sj
from contracts.advisories import MaxDeliveriesAdvisory
from contracts.dlq import DeadLetter
from contracts.envelope import is_valid_request_id
from contracts.models import ErrorInfo
from contracts.results import StepFailure
from infra.logging import get_logger
from infra.metrics import DEAD_LETTERS
from infra.runtime.bus import Bus
from infra.runtime.ingest_jobs import JobTracker, publish_progress

log = get_logger(__name__)

MAX_DELIVERIES = "max_deliveries"
WORK_QUEUES = frozenset({sj.STREAM_QUERIES, sj.STREAM_CMD, sj.STREAM_RES, sj.STREAM_INGEST})
"""The streams whose messages are work: a message left in one of them is lost work."""
INGEST_OPERATIONS = frozenset({"ingest.document", "ingest.file", "ingest.refused", "ingest.delete"})
"""The messages that each count as one document of an ingest job (the seal does not): a
file to parse (`ingest.file`) counts as the document the parse worker makes of it, or as the
refusal (`ingest.refused`) it sends in its place."""


def _json_object(body: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def request_id_of(body: str) -> str | None:
    """The request a message's JSON body names, when it names a well-formed one."""
    request_id = (_json_object(body) or {}).get("request_id")
    return request_id if isinstance(request_id, str) and is_valid_request_id(request_id) else None


async def dead_letter(
    bus: Bus,
    subject: str,
    body: str,
    headers: dict[str, str],
    *,
    reason: str,
    error: str,
    deliveries: int,
    event_id: str | None = None,
) -> DeadLetter:
    """Copy a message to `rag.dlq.<subject>`; `event_id` makes a re-sent letter a duplicate."""
    parsed = _json_object(body) or {}
    request_id = parsed.get("request_id")
    letter = DeadLetter(
        original_subject=subject,
        reason=reason,
        error=error[:4000],
        deliveries=deliveries,
        request_id=request_id if isinstance(request_id, str) else None,
        payload=body[:1_000_000],
        headers=headers,
        **({"event_id": event_id} if event_id else {}),
    )
    await bus.publish(letter, sj.dlq_subject(subject), sj.STREAM_DLQ)
    DEAD_LETTERS.labels(subject=subject, reason=reason).inc()
    log.warning(
        "dead_lettered", subject=subject, reason=reason, error=error, request_id=letter.request_id
    )
    return letter


async def report_step_failure(bus: Bus, subject: str, body: str, error: str) -> bool:
    """Tell the orchestrator a command failed for good, when the body says whose it was."""
    result_subject = sj.result_subject_for(subject)
    raw = _json_object(body)
    if result_subject is None or raw is None:
        return False
    request_id, command_id = raw.get("request_id"), raw.get("event_id")
    if not (isinstance(request_id, str) and is_valid_request_id(request_id)) or not command_id:
        return False
    step = subject.removeprefix(sj.CMD_PREFIX + ".").split(".")[0]
    channel = raw.get("channel") if step == "search" else None
    try:
        failure = StepFailure(
            request_id=request_id,
            command_id=str(command_id),
            attempt=int(raw.get("attempt", 1)),
            step=step,
            channel=channel,
            error=ErrorInfo(code="step_failed", message=error[:2000]),
        )
    except (ValidationError, ValueError, TypeError):
        return False
    await bus.publish(failure, result_subject, sj.STREAM_RES)
    return True


@dataclass(frozen=True)
class DocumentFailure:
    """An ingest document counted as failed in its job: which job, whether that ended it, and
    the job's state as its watchers were told it."""

    job_id: str
    completed: bool
    state: dict[str, Any]


async def report_document_failure(
    jobs: JobTracker, bus: Bus, body: str, error: str
) -> DocumentFailure | None:
    """Count an ingest document (or a file to parse, or a deletion) that will never be
    processed as failed in its job, and tell the job's watchers, so the job still ends and
    says which document and why. None when the body names no job."""
    raw = _json_object(body)
    if raw is None:
        return None
    job_id, event_id = raw.get("request_id"), raw.get("event_id")
    document = raw.get("document")
    document_id = document.get("id") if isinstance(document, dict) else raw.get("document_id")
    if not (isinstance(job_id, str) and is_valid_request_id(job_id)) or not event_id:
        return None
    if raw.get("type") not in INGEST_OPERATIONS:
        return None
    document_id, error = str(document_id or "")[:512], error[:2000]
    completed = await jobs.record(
        job_id, str(event_id), "failed", document_id=document_id, error=error
    )
    state = await publish_progress(bus, jobs.redis, job_id, document_id or None, error)
    return DocumentFailure(job_id, completed, state)


async def _requeue_document(
    js: JetStreamContext,
    bus: Bus,
    jobs: JobTracker,
    advisory: MaxDeliveriesAdvisory,
    subject: str,
    body: str,
    limit: int,
) -> bool:
    """Publish an ingest document (or a file to parse) afresh (a new delivery budget) when
    its deliveries all died unacknowledged, at most `limit` times per document. A message only
    reaches here when no delivery acknowledged it or raised (the worker dead-letters what
    raises), so this is a process killed or hung over and over; indexing is idempotent by
    content, and the job counts the document once (by its event id)."""
    raw = _json_object(body)
    if raw is None or raw.get("type") not in ("ingest.document", "ingest.file"):
        return False
    job_id, event_id = raw.get("request_id"), raw.get("event_id")
    if not (isinstance(job_id, str) and is_valid_request_id(job_id)) or not event_id:
        return False
    count = await jobs.requeue(job_id, str(event_id), limit)
    if count is None:
        return False
    await bus.publish_raw(body.encode(), subject, advisory.stream, f"{event_id}~requeue{count}")
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await js.delete_msg(advisory.stream, advisory.stream_seq)
    log.warning(
        "ingest_document_requeued",
        job_id=job_id,
        event_id=event_id,
        requeue=count,
        deliveries=advisory.deliveries,
    )
    return True


async def handle_max_deliveries(
    js: JetStreamContext,
    bus: Bus,
    advisory: MaxDeliveriesAdvisory,
    jobs: JobTracker | None = None,
    ingest_requeues: int = 0,
) -> DeadLetter | None:
    """Dead-letter the message JetStream stopped delivering, report its step failed (or, for an
    ingest document, count it failed in its job), and take it out of its work queue. None when
    there is nothing to do: not one of our work queues, or the message is already gone
    (acknowledged late, or handled by an earlier delivery of this advisory), or it is an
    ingest document started afresh (`ingest_requeues`)."""
    if advisory.stream not in WORK_QUEUES:
        return None
    try:
        stored = await js.get_msg(advisory.stream, advisory.stream_seq)
    except nats.js.errors.NotFoundError:
        log.info("undelivered_message_gone", stream=advisory.stream, seq=advisory.stream_seq)
        return None
    subject = stored.subject or ""
    body = (stored.data or b"").decode("utf-8", errors="replace")
    if (
        advisory.stream == sj.STREAM_INGEST
        and jobs is not None
        and ingest_requeues > 0
        and await _requeue_document(js, bus, jobs, advisory, subject, body, ingest_requeues)
    ):
        return None
    headers = {k: str(v) for k, v in (stored.headers or {}).items()}
    error = (
        f"delivered {advisory.deliveries} times to consumer {advisory.consumer} and never "
        "acknowledged: the worker holding it died or hung each time"
    )
    letter = await dead_letter(
        bus,
        subject,
        body,
        headers,
        reason=MAX_DELIVERIES,
        error=error,
        deliveries=advisory.deliveries,
        event_id=f"max-deliveries-{advisory.stream}-{advisory.stream_seq}",
    )
    if advisory.stream == sj.STREAM_INGEST:
        if jobs is not None:
            await report_document_failure(jobs, bus, body, error)
    else:
        await report_step_failure(bus, subject, body, error)
    with contextlib.suppress(nats.js.errors.NotFoundError):  # acknowledged meanwhile
        await js.delete_msg(advisory.stream, advisory.stream_seq)
    return letter
