"""Compact JSON between ragbus's own processes, and the settled heap."""

from __future__ import annotations

import gc

from contracts import subjects as sj
from contracts.commands import FuseCommand, SearchCommand
from contracts.enums import Channel, Phase, PhaseStatus
from contracts.events import PhaseData, PhaseEvent
from contracts.models import RetrievedChunk
from contracts.results import SearchResult, any_result_adapter
from infra.runtime.bus import wire_json
from infra.runtime.heap import YOUNG_THRESHOLD, settle_heap


def test_compact_json_leaves_out_defaults_but_keeps_the_type_and_reads_back_equal() -> None:
    cmd = SearchCommand(
        request_id="r1", channel=Channel.SPARSE, query="q", namespaces=["default"], top_k=5
    )
    body = cmd.compact_json()
    assert body.startswith('{"type":"cmd.search",')
    assert '"tenant"' not in body and '"query_vector"' not in body
    assert SearchCommand.model_validate_json(body) == cmd


def test_a_compact_result_is_told_apart_by_the_union() -> None:
    chunk = RetrievedChunk(chunk_id="c1", document_id="d1", score=0.5, rank=1)
    res = SearchResult(request_id="r1", command_id="x", channel=Channel.VECTOR, chunks=[chunk])
    body = res.compact_json()
    assert '"namespace"' not in body  # the chunk's defaults are left out too
    assert any_result_adapter.validate_json(body) == res


def test_an_envelope_at_all_its_defaults_is_still_valid_json() -> None:
    cmd = FuseCommand(request_id="r1", query="q", weights={}, results={}, top_k=1)
    assert FuseCommand.model_validate_json(cmd.compact_json()) == cmd


def test_work_goes_compact_and_what_others_read_keeps_every_field() -> None:
    cmd = SearchCommand(
        request_id="r1", channel=Channel.SPARSE, query="q", namespaces=["default"], top_k=5
    )
    assert wire_json(cmd, sj.STREAM_CMD) == cmd.compact_json()
    event = PhaseEvent(
        request_id="r1",
        data=PhaseData(phase=Phase.FUSION, status=PhaseStatus.COMPLETED, duration_ms=1.0),
    )
    for stream in (sj.STREAM_EVENTS, sj.STREAM_DLQ, sj.STREAM_INGEST_EVENTS):
        body = wire_json(event, stream)
        assert '"tenant":"default"' in body and '"attempt":1' in body
        # what is not there at all is left out: no trace state, no second end stamp
        assert '"tracestate"' not in body and '"ended_at"' not in body
        assert PhaseEvent.model_validate_json(body) == event


def test_settle_heap_freezes_start_up_and_spaces_young_collections() -> None:
    before = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_threshold()[1:] == before[1:]
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
