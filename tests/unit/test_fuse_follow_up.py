"""A decomposed retry's fusion: the previous attempt's best chunks stay first, each follow-up
query adds its best new ones after them (the worker's part is in test_answer_workers_broker)."""

from __future__ import annotations

from contracts.models import RetrievedChunk
from engines.fuse.follow_up import FOLLOW_UP_CHANNEL, KEEP, PER_QUERY, follow_up


def ranking(*ids: str, channel: str = "vector") -> list[RetrievedChunk]:
    return [
        RetrievedChunk(chunk_id=cid, document_id="d-" + cid, text=cid, channels={channel: rank})
        for rank, cid in enumerate(ids, start=1)
    ]


CARRIED = ranking(*(f"c{i}" for i in range(1, 11)))


def test_follow_ups_join_after_the_kept_head_and_push_the_tail_down() -> None:
    first = ranking("c2", "n1", "n2", "n3")  # c2 is already kept: it is not added twice
    second = ranking("n4", "c9")  # c9 was in the tail: it moves up
    merged = follow_up(CARRIED, [first, second], top_k=10)
    ids = [c.chunk_id for c in merged]
    head = [f"c{i}" for i in range(1, KEEP + 1)]
    assert ids[:KEEP] == head
    assert ids[KEEP : KEEP + 2 * PER_QUERY] == ["n1", "n2", "n4", "c9"]
    assert len(ids) == 10 and len(set(ids)) == 10
    assert [c.rank for c in merged] == list(range(1, 11))
    by_id = {c.chunk_id: c for c in merged}
    assert by_id["n1"].channels == {"vector": 2, FOLLOW_UP_CHANNEL: 2}
    assert by_id["c9"].channels[FOLLOW_UP_CHANNEL] == 2
    assert FOLLOW_UP_CHANNEL not in by_id["c1"].channels


def test_a_short_previous_list_is_filled_from_the_follow_ups() -> None:
    merged = follow_up(CARRIED[:2], [ranking("n1", "n2", "n3", "n4")], top_k=5)
    assert [c.chunk_id for c in merged] == ["c1", "c2", "n1", "n2", "n3"]


def test_no_follow_up_findings_leave_the_previous_list_as_it_was() -> None:
    merged = follow_up(CARRIED, [[], ranking("c1", "c3")], top_k=8)
    assert [c.chunk_id for c in merged] == [c.chunk_id for c in CARRIED[:8]]
