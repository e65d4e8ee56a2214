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

log = get_logger(__name__)

MAX_DELIVERIES = "max_deliveries"
WORK_QUEUES = frozenset({sj.STREAM_QUERIES, sj.STREAM_CMD, sj.STREAM_RES, sj.STREAM_INGEST})
"""The streams whose messages are work: a message left in one of them is lost work."""


def _json_object(body: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


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


async def handle_max_deliveries(
    js: JetStreamContext, bus: Bus, advisory: MaxDeliveriesAdvisory
) -> DeadLetter | None:
    """Dead-letter the message JetStream stopped delivering, report its step failed, and take it
    out of its work queue. None when there is nothing to do: not one of our work queues, or the
    message is already gone (acknowledged late, or handled by an earlier delivery of this
    advisory)."""
    if advisory.stream not in WORK_QUEUES:
        return None
    try:
        stored = await js.get_msg(advisory.stream, advisory.stream_seq)
    except nats.js.errors.NotFoundError:
        log.info("undelivered_message_gone", stream=advisory.stream, seq=advisory.stream_seq)
        return None
    subject = stored.subject or ""
    body = (stored.data or b"").decode("utf-8", errors="replace")
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
    await report_step_failure(bus, subject, body, error)
    with contextlib.suppress(nats.js.errors.NotFoundError):  # acknowledged meanwhile
        await js.delete_msg(advisory.stream, advisory.stream_seq)
    return letter
