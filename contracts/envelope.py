"""The envelope every bus message carries, and the identifier rules."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from contracts.tenancy import DEFAULT_TENANT, TenantName

REQUEST_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
"""Request and job ids become subject tokens: no dots, spaces or wildcards may get in."""

_REQUEST_ID_RE = re.compile(REQUEST_ID_PATTERN)

RequestId = Annotated[str, StringConstraints(pattern=REQUEST_ID_PATTERN)]


def is_valid_request_id(value: str) -> bool:
    return bool(_REQUEST_ID_RE.fullmatch(value))


def new_event_id() -> str:
    return uuid.uuid4().hex


def new_request_id() -> str:
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


class TraceContext(BaseModel):
    """W3C trace context, carried so a request can be followed across processes."""

    model_config = ConfigDict(extra="ignore")

    traceparent: str | None = None
    tracestate: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="vendor trace state; left out of a message when there is none",
    )

    @property
    def trace_id(self) -> str | None:
        """The trace id of `traceparent` (`00-<trace id>-<span id>-<flags>`), or None."""
        parts = (self.traceparent or "").split("-")
        if len(parts) == 4 and len(parts[1]) == 32 and parts[1] != "0" * 32:
            return parts[1]
        return None


class Envelope(BaseModel):
    """Fields common to every message: identity, correlation, retry round and time.

    `event_id` doubles as the JetStream `Nats-Msg-Id`, so a re-published message is
    dropped by the broker, and as the orchestrator's dedupe key.
    """

    model_config = ConfigDict(extra="forbid")

    event_id: str = Field(default_factory=new_event_id, min_length=1, max_length=128)
    request_id: RequestId
    tenant: TenantName = Field(
        default=DEFAULT_TENANT,
        description="who owns the request (or job): its events go to "
        "`rag.events.<tenant>.<request_id>`",
    )
    type: str
    attempt: int = Field(default=1, ge=1, le=100)
    occurred_at: datetime = Field(default_factory=utcnow)
    trace: TraceContext = Field(default_factory=TraceContext)

    def compact_json(self) -> str:
        """The JSON of a message between ragbus's own processes: fields at their defaults are
        left out (the reader's contract fills them in again), except `type`, which the unions
        discriminate by. A quarter to a half fewer bytes to send, store and parse."""
        body = self.model_dump_json(exclude_defaults=True, exclude={"type"})
        return '{"type":' + json.dumps(self.type) + "," + body[1:]  # request_id is never left out

    def correlation(self) -> dict[str, object]:
        """The fields a message about the same request copies from this one."""
        return {
            "request_id": self.request_id,
            "tenant": self.tenant,
            "attempt": self.attempt,
            "trace": self.trace,
        }
