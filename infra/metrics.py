"""Prometheus metrics shared by every service in a process (exposed by the API at /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

MESSAGES = Counter(
    "ragbus_messages_total", "Bus messages handled, by subject and outcome", ["subject", "outcome"]
)
STEP_SECONDS = Histogram(
    "ragbus_step_seconds",
    "Time a worker spent on one step",
    ["phase"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
REQUESTS = Counter("ragbus_requests_total", "Requests that reached a terminal state", ["status"])
REQUEST_SECONDS = Histogram(
    "ragbus_request_seconds",
    "Submit-to-terminal time of requests",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
)
UNKNOWN_REQUESTS = Counter(
    "ragbus_unknown_requests_total",
    "Messages dropped because their request does not exist or has finished",
    ["kind"],
)
FENCED_EVENTS = Counter(
    "ragbus_fenced_events_total",
    "Step events sent fenced against their request's done (infra.runtime.done_fence): "
    "sent, dropped (the done was there, or landed first), refused (another message landed "
    "between the read and the publish; read again) or contended (sent the plain way)",
    ["outcome"],
)
ORPHANS_SWEPT = Counter(
    "ragbus_orphans_swept_total",
    "Work-queue messages found below their consumer's ack floor and deleted",
    ["stream"],
)
DEAD_LETTERS = Counter("ragbus_dead_letters_total", "Messages dead-lettered", ["subject", "reason"])
ENCODER_PASS_TEXTS = Histogram(
    "ragbus_encoder_pass_texts",
    "Texts per encoder forward pass (concurrent calls share passes)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
)
REFUSED_REQUESTS = Counter(
    "ragbus_refused_requests_total",
    "HTTP requests refused for what they would cost the API: a body over its limit, a "
    "tenant's file transfers over theirs, or too little disk left for an upload",
    ["reason"],
)
