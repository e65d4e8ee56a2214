"""`ragbus bench-during-ingest`'s verdict (`bench.during_ingest.summary`): the ratio is of the
mean p95s, the worst round is reported beside it, and a busy round that outlasted the ingest
means the goal is not called met; nor does a run with failed requests (a quota's 429s held
its load down)."""

from __future__ import annotations

from typing import Any

from bench.during_ingest import summary


def rounds(*p95: float, ingesting: bool = True) -> list[dict[str, Any]]:
    return [{"p95_ms": value, "ingest_running_throughout": ingesting} for value in p95]


def test_the_ratio_is_of_the_mean_p95s_with_the_worst_round_beside_it() -> None:
    verdict = summary(rounds(360, 300, 330), rounds(280, 300, 320))
    assert verdict["busy_p95_ms"] == 330.0 and verdict["idle_p95_ms"] == 300.0
    assert verdict["ratio"] == 1.1
    assert verdict["worst_round_ratio"] == 1.2
    assert verdict["met"] is True


def test_a_slow_ingest_misses_the_goal() -> None:
    assert summary(rounds(480, 470, 460), rounds(300, 300, 300))["met"] is False


def test_a_round_that_outlasted_the_ingest_is_not_called_met() -> None:
    busy = rounds(300, 310) + rounds(290, ingesting=False)
    verdict = summary(busy, rounds(300, 300, 300))
    assert verdict["ratio"] <= 1.5 and verdict["met"] is False


def test_a_run_with_failed_requests_is_not_called_met() -> None:
    idle = [*rounds(300, 300), {"p95_ms": 300, "errors": 201, "rate_limited": 201}]
    verdict = summary(rounds(300, 300, 300), idle)
    assert verdict["ratio"] == 1.0 and verdict["errors"] == 201
    assert verdict["met"] is False
