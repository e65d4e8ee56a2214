"""The chaos suite, short: every role in its own process, a SIGKILL every few seconds, nats-server
and redis-server killed and restarted once each, the ingest process killed mid-job; checked
from the broker and the stores (`bench.chaos`); then the same on a three-node NATS cluster,
one node killed at a time. `ragbus chaos` runs the long version.

Marked `soak`: `make soak` runs it before the ten-minute run; `make test` leaves it out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from api.event_stream import stored_events
from api.idempotency import kept_query_key
from bench.chaos import run_chaos
from cli.chaos import _goals

RUN_LIMIT_S = 540
"""A run's own limit, inside pytest's: past it the run is cancelled and says what it was
waiting for (`bench.chaos.run_chaos`), and keeps its roles' log. Alone a run takes about
2.5 minutes; beside `make soak`'s fuzz workers on two cores, twice that."""

pytestmark = [
    pytest.mark.integration,
    pytest.mark.soak,
    pytest.mark.timeout(RUN_LIMIT_S + 60),
]

REPORTED = (
    "requests",
    "duplicates",
    "sse_streams_missing_events",
    "sse_events_after_done",
    "dead_letters",
    "ingest",
    "kills_by_role",
    "service_restarts",
    "nats_node_kills",
    "crash_restarts",
    "latency_ms",
    "slowest",
    "redis",
)
"""The parts of the report a failed check prints."""


async def _within_limit(**options: Any) -> dict[str, Any]:
    return await asyncio.wait_for(run_chaos(**options), RUN_LIMIT_S)


def assert_nothing_lost_or_doubled(report: dict[str, Any]) -> None:
    """Every request terminal once, no answer or `done` twice, no event missed by a stream,
    the ingest job complete with every document indexed exactly once, and no goal missed."""
    requests, ingest = report["requests"], report["ingest"]
    # what a failure in CI prints, whichever check it was: the run is gone afterwards
    seen = {key: report.get(key) for key in REPORTED}
    assert requests["submitted"] >= 10, seen
    assert requests["terminal"] == requests["submitted"], seen
    assert report["duplicates"] == {"answers": 0, "done": 0}, seen
    assert report["sse_streams_missing_events"] == 0, report["sse_streams_missing"]
    assert ingest["job_status"] == "completed", seen
    assert ingest["documents_failed"] == 0, seen
    assert ingest["documents_done"] + ingest["documents_unchanged"] == ingest["documents"], seen
    lost = (ingest["chunks_lost"], ingest["chunks_extra"], ingest["documents_lost"])
    assert lost == (0, 0, 0), seen
    assert _goals(report) == [], seen


async def test_a_short_chaos_run_loses_and_doubles_nothing() -> None:
    report = await _within_limit(
        duration_s=40,
        concurrency=2,
        kill_every_s=4,
        ingest_documents=24,
        seed=7,
        read_events=stored_events,
    )
    assert report["kills"] >= 5
    assert report["service_restarts"] == {"nats": 1, "redis": 1}
    assert_nothing_lost_or_doubled(report)


async def test_a_short_chaos_run_on_a_nats_cluster_loses_and_doubles_nothing() -> None:
    """The same, on a three-node JetStream cluster: one NATS node at a time is SIGKILLed (a
    stream's leader, the ingest stream's while the job runs) and brought back."""
    report = await _within_limit(
        duration_s=45,
        concurrency=2,
        kill_every_s=5,
        ingest_documents=24,
        seed=7,
        read_events=stored_events,
        nats_nodes=3,
        nats_kill_every_s=10,
    )
    # Outages come every 6-14 s, each down 3-8 s and then waiting for every stream to catch
    # up, one at a time (the ingest stream's leader shares the turn), and one is skipped
    # while a node still catches up: 45 s hold two to four. Asking for three failed here one
    # run in eight, on a schedule that was only slower, not broken.
    kills = report["nats_node_kills"]
    assert sum(kills.values()) >= 2, (kills, report["nats_node_outages_skipped"])
    assert report["service_restarts"] == {"nats": 0, "redis": 1}, report["service_restarts"]
    assert_nothing_lost_or_doubled(report)


async def test_a_short_chaos_run_with_the_redis_primary_killed_loses_nothing() -> None:
    """The same with Redis behind sentinels: its primary SIGKILLed every 12-28 s and the
    replica promoted, while the clients ask in conversations under a binding quota; nothing
    acknowledged is lost: no idempotency key, no session's turn, no quota grant."""
    report = await _within_limit(
        duration_s=45,
        concurrency=2,
        kill_every_s=5,
        ingest_documents=24,
        seed=7,
        read_events=stored_events,
        redis_sentinel=True,
        redis_kill_every_s=20,
        quota=(3.0, 6),
        kept_key=kept_query_key,
    )
    redis = report["redis"]
    assert redis["primary_kills"] >= 1, redis
    assert len(redis["failover_s"]) == redis["primary_kills"], redis
    assert redis["idempotency_keys_checked"] == report["requests"]["submitted"], redis
    assert redis["idempotency_keys_lost"] == 0, redis
    assert redis["sessions_checked"] >= 2 and redis["sessions_lost_turns"] == 0, redis
    assert redis["quota_over_granted"] == 0, redis
    assert report["service_restarts"] == {"nats": 1, "redis": 0}, report["service_restarts"]
    assert_nothing_lost_or_doubled(report)
