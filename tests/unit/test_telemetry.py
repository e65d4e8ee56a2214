"""The tracing helpers: trace ids without an SDK, the OTel environment, the exporters."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

from contracts.envelope import TraceContext
from infra import telemetry


def test_without_tracing_a_request_still_gets_a_trace_id_flagged_not_sampled() -> None:
    assert not telemetry.tracing_on()
    minted = telemetry.mint_trace()
    version, trace_id, span_id, flags = (minted.traceparent or "").split("-")
    assert (version, flags, len(span_id)) == ("00", "00", 16)
    assert minted.trace_id == trace_id and len(trace_id) == 32
    assert telemetry.mint_trace().trace_id != trace_id
    assert telemetry.broker_middlewares() == ()


@pytest.mark.parametrize(
    ("traceparent", "trace_id"),
    [
        (
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "4bf92f3577b34da6a3ce929d0e0e4736",
        ),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),
        ("garbage", None),
        (None, None),
    ],
)
def test_the_trace_id_is_read_from_traceparent(
    traceparent: str | None, trace_id: str | None
) -> None:
    assert TraceContext(traceparent=traceparent).trace_id == trace_id


def test_exporting_follows_the_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*telemetry.ENDPOINT_VARIABLES, "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    assert not telemetry.exporting_configured()
    assert telemetry.setup_tracing("test") is False, "no endpoint: nothing is set up"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert telemetry.exporting_configured()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not telemetry.exporting_configured()


def test_the_protocol_picks_the_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    assert isinstance(telemetry.otlp_exporter(), HttpExporter)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    assert isinstance(telemetry.otlp_exporter(), GrpcExporter)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="http/protobuf or grpc"):
        telemetry.otlp_exporter()
