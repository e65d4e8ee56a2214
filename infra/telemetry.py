"""Tracing: one OpenTelemetry trace per question, across every process and hop.

- The API's span is the trace's root; its W3C `traceparent` rides in the envelope of every
  message of the request (`Envelope.trace`) and, through FastStream's telemetry middleware,
  in the NATS headers, so each consumer's `rag.cmd.fuse process` span, each step's span and
  each saga transition's span joins the same trace, across processes and retries.
- The saga's timer (a step's or the request's deadline) acts outside any message: it
  continues the trace from the state's `traceparent` (`continue_trace`).
- Exporting follows the standard OTel environment (`OTEL_EXPORTER_OTLP_ENDPOINT`,
  `OTEL_EXPORTER_OTLP_PROTOCOL` = `http/protobuf` or `grpc`, `OTEL_SERVICE_NAME`,
  `OTEL_TRACES_SAMPLER`, ...). With no endpoint nothing is set up: no SDK, no middleware,
  no span is made, and the API still mints a trace id (flagged not sampled) so that logs,
  the status and the answer carry one.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanProcessor

from contracts.envelope import TraceContext
from infra.logging import get_logger

log = get_logger(__name__)

TRACER_NAME = "ragbus"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class _Processors(SpanProcessor):
    """The span processors in force: the global provider can be set only once per process,
    its processors never removed; this list can be emptied (`stop_tracing`)."""

    def __init__(self) -> None:
        self.processors: list[SpanProcessor] = []

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        for processor in self.processors:
            processor.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        for processor in self.processors:
            processor.on_end(span)

    def shutdown(self) -> None:
        for processor in self.processors:
            processor.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return all(p.force_flush(timeout_millis) for p in self.processors)


_provider: TracerProvider | None = None
_processors = _Processors()


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


def exporting_configured() -> bool:
    """Whether the environment asks for traces to be exported."""
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if os.environ.get("OTEL_TRACES_EXPORTER", "").lower() == "none":
        return False
    return any(os.environ.get(name) for name in ENDPOINT_VARIABLES)


def otlp_exporter() -> SpanExporter:
    """The OTLP exporter of the configured protocol; it reads its endpoint, headers and
    timeout from the environment itself."""
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol != "http/protobuf":
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: ragbus exports http/protobuf or grpc"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter()


def setup_tracing(role: str, processor: SpanProcessor | None = None) -> bool:
    """Install the SDK for this process when exporting is configured (or a test hands in
    its own span processor). The service is `OTEL_SERVICE_NAME`, else `ragbus-<role>`.
    True when spans are being recorded. A second call adds its processor to the provider
    the first one installed (the global provider can be set once per process)."""
    global _provider
    if processor is None:
        if not exporting_configured():
            return tracing_on()
        processor = BatchSpanProcessor(otlp_exporter())
    if _provider is None:
        attributes: dict[str, Any] = {}
        if not os.environ.get("OTEL_SERVICE_NAME"):
            attributes[SERVICE_NAME] = f"ragbus-{role}"
        _provider = TracerProvider(resource=Resource.create(attributes))
        _provider.add_span_processor(_processors)
        trace.set_tracer_provider(_provider)
    _processors.processors.append(processor)
    log.info("tracing_on", service=_provider.resource.attributes.get(SERVICE_NAME))
    return True


def tracing_on() -> bool:
    return bool(_processors.processors)


def shutdown_tracing() -> None:
    """Flush what is queued (the batch processor exports every few seconds)."""
    _processors.force_flush(5_000)


def stop_tracing() -> None:
    """Flush and drop every processor: brokers made from now on have no telemetry middleware
    (a test that traced one stack leaves the next ones as they were)."""
    _processors.force_flush(5_000)
    _processors.shutdown()
    _processors.processors.clear()


def broker_middlewares() -> tuple[Any, ...]:
    """FastStream's telemetry middleware when tracing is on: a `<subject> publish` and a
    `<subject> process` span per message, and `traceparent` in its NATS headers."""
    if not tracing_on():
        return ()
    from faststream.nats.opentelemetry import NatsTelemetryMiddleware

    return (NatsTelemetryMiddleware(tracer_provider=_provider, include_messages_counters=False),)


def mint_trace() -> TraceContext:
    """The current span's trace context, or, with no span, a fresh trace id flagged not
    sampled, so every request has a trace id to log and show."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if "traceparent" in carrier:
        return TraceContext(
            traceparent=carrier["traceparent"], tracestate=carrier.get("tracestate")
        )
    return TraceContext(traceparent=f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-00")


@contextmanager
def continue_trace(trace_context: TraceContext | None) -> Iterator[None]:
    """Make the request's trace current where no message brought it (the saga's timer)."""
    if not tracing_on() or trace_context is None or not trace_context.traceparent:
        yield
        return
    if trace.get_current_span().get_span_context().is_valid:
        yield
        return
    carrier = {"traceparent": trace_context.traceparent}
    if trace_context.tracestate:
        carrier["tracestate"] = trace_context.tracestate
    token = context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        context.detach(token)
