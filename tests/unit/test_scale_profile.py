"""`bench.scale_profile`: py-spy's raw samples of the stores' process filed by the store work
on their stacks, in GIL milliseconds a request."""

from __future__ import annotations

from bench.ledger import parse_frames
from bench.scale_profile import (
    EDGE_OTHER,
    MESSAGING,
    OTHER,
    RATE_HZ,
    gil_ledger,
    store_work,
    summarise,
)

HANDLE = "handle (workers/search/__init__.py:291)"


def _stack(*frames: str) -> str:
    return ";".join(("Handle._run (asyncio/events.py:80)", HANDLE, *frames))


SAMPLES = [
    _stack(
        "refine (engines/search/refine.py:61)",
        "search_again (engines/search/feedback.py:161)",
        "VectorStore.read (infra/retrieval/vectors/base.py:66)",
        "VectorStore.search_sparse (infra/retrieval/vectors/base.py:218)",
        "EdgeVectorStore._query (infra/retrieval/vectors/edge.py:375)",
    )
    + " 30",
    _stack(
        "search_channel (engines/search/channel_search.py:84)",
        "VectorStore.search_dense (infra/retrieval/vectors/base.py:204)",
        "EdgeVectorStore._query (infra/retrieval/vectors/edge.py:375)",
    )
    + " 20",
    _stack(
        "fuse_rankings (engines/fuse/pipeline.py:113)",
        "bridge (engines/fuse/bridge.py:60)",
        "EmbeddedGraphStore.local_search (infra/retrieval/graph/embedded.py:228)",
    )
    + " 5",
    _stack(
        "search_graph_local (engines/search/channels.py:108)",
        "EmbeddedGraphStore.local_search (infra/retrieval/graph/embedded.py:228)",
    )
    + " 15",
    _stack("EdgeVectorStore.count (infra/retrieval/vectors/edge.py:390)") + " 2",
    "Handle._run (asyncio/events.py:80);Client._read_loop (nats/aio/client.py:2100) 10",
    _stack("ranked (engines/search/channel_search.py:42)") + " 3",
    "not a stack line",
]


def test_each_sample_is_filed_by_the_store_work_on_its_stack() -> None:
    works = [store_work(parse_frames(line.rpartition(" ")[0])) for line in SAMPLES[:-1]]
    assert works == [
        "Edge: the feedback search, sparse",
        "Edge: the dense channel",
        "graph: the fusion's bridge",
        "graph: local search",
        EDGE_OTHER,
        MESSAGING,
        OTHER,
    ]


def test_the_ledger_says_how_busy_the_gil_was_and_each_works_ms_a_request() -> None:
    found = gil_ledger(SAMPLES, seconds=2, requests=10)
    assert found["samples"] == 85
    assert found["gil_busy"] == round(85 / (2 * RATE_HZ), 3)
    per_sample_ms = 1000 / RATE_HZ
    assert found["gil_ms_per_request"] == round(85 * per_sample_ms / 10, 2)
    assert found["by_work"][0] == {
        "name": "Edge: the feedback search, sparse",
        "gil_ms_per_request": round(30 * per_sample_ms / 10, 2),
    }
    assert sum(w["gil_ms_per_request"] for w in found["by_work"]) == found["gil_ms_per_request"]


def test_a_summary_counts_the_requests_answered_while_sampling() -> None:
    recorded = {"seconds": 2, "stores": SAMPLES, "api": [SAMPLES[-2]]}
    report = {"throughput_qps": 5.0, "cpu": {"process_cpu_ms_per_request": {"ragbus": 12.0}}}
    summary = summarise(recorded, report)
    assert summary["stores_gil"]["gil_ms_per_request"] == round(85 * 1000 / RATE_HZ / 10, 2)
    assert summary["api_cpu"]["samples"] == 3
    assert summary["api_cpu"]["by_role"][0]["ms_per_request"] == 12.0
