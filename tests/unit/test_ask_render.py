"""`ragbus ask` renders each finished phase on one line, short facts before long texts."""

from __future__ import annotations

from cli.answers import _phase_line


def test_a_finished_phase_shows_its_short_facts_before_a_long_query() -> None:
    query = "Why did the Americans build a lock canal, and who designed the Gatun Locks?"
    line = _phase_line(
        {
            "phase": "vector_search",
            "status": "completed",
            "duration_ms": 64.2,
            "metadata": {"channel": "vector", "query": query, "count": 20, "scores": [0.5]},
        }
    )
    assert line is not None
    assert "vector_search" in line and "64 ms" in line
    assert line.index("count=20") < line.index("query=Why did")
    assert "scores" not in line


def test_a_phase_in_progress_is_not_rendered() -> None:
    assert _phase_line({"phase": "fusion", "status": "in_progress"}) is None
