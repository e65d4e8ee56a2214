"""The bench peer: it reads a copy of ragbus's Edge shard, fuses a dense and a bm25s ranking
with RRF, and reports closed-loop load the way `ragbus bench` does."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from bench.peer import PeerRetriever, QueryEncoder, _copy_sparse, compare, run_peer
from infra.retrieval.chunking import Chunk, chunk_id_for
from infra.retrieval.lexical import SparseEncoder
from infra.retrieval.vectors.edge import EdgeVectorStore
from infra.settings import Settings
from tests.unit.fakes import BrokenEncoder, FakeEncoder

NS = "docs"
DIM = 64
TEXTS = [
    "The Gatun Locks lift ships twenty-six metres to the lake.",
    "The Culebra Cut was dug through the continental divide.",
    "Yellow fever was beaten by draining the mosquito breeding grounds.",
    "Goethals ran the canal works as chief engineer from 1907.",
    "Roosevelt persuaded Congress to adopt a lock canal in 1906.",
]


def _chunk(doc: str, text: str) -> Chunk:
    return Chunk(chunk_id_for(NS, doc, 0), doc, NS, "", f"{doc}.md", 0, text)


def _write(store: EdgeVectorStore, doc: str, text: str, vector: np.ndarray) -> str:
    chunk = _chunk(doc, text)
    sparse = [SparseEncoder().encode_document(text)]
    store.upsert_chunks(NS, [chunk], vector.reshape(1, -1), sparse, f"hash-{doc}")
    return chunk.chunk_id


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(data_dir=tmp_path)


@pytest.fixture
def store(settings) -> Iterator[EdgeVectorStore]:
    """The store a running ragbus owns: left open while the peer copies it."""
    opened = EdgeVectorStore(settings.vectors_path, DIM)
    yield opened
    opened.close()


@pytest.fixture
def corpus(store) -> list[str]:
    encoder = FakeEncoder(DIM)
    return [
        _write(store, f"doc{i}", text, encoder.encode([text])[0]) for i, text in enumerate(TEXTS)
    ]


class FixedEncoder:
    """Every query becomes the same vector, so the dense ranking is set by the test."""

    dim = 4

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.tile(np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32), (len(texts), 1))


def test_exact_text_comes_first_and_the_original_stays_usable(settings, store, corpus):
    peer = PeerRetriever.from_store_copy(settings, NS, encoder=FakeEncoder(DIM))
    assert len(peer) == len(TEXTS)
    assert peer.load_s > 0
    for text, chunk_id in zip(TEXTS, corpus, strict=True):
        found = peer.search(text, k=3)
        assert found[0] == chunk_id
        assert len(found) == 3
    peer.close()
    # the copy left ragbus's own shard alone: it still takes writes
    _write(store, "later", "A later document.", FakeEncoder(DIM).encode(["later"])[0])
    assert store.count(NS) == len(TEXTS) + 1


def test_rrf_ranks_a_chunk_both_channels_found_above_single_channel_ones(settings):
    store = EdgeVectorStore(settings.vectors_path, 4)
    unit = np.eye(4, dtype=np.float32)
    # dense (query = axis 0): best, both, then the rest; bm25 ("zebra"): only both and sparse
    best = _write(store, "best", "Ships cross the isthmus.", unit[0])
    both = _write(store, "both", "A zebra crossed.", np.array([0.8, 0.6, 0, 0], np.float32))
    sparse = _write(store, "sparse", "Zebra after zebra.", unit[1])
    neither = _write(store, "neither", "Locks and dams.", unit[2])
    peer = PeerRetriever.from_store_copy(settings, NS, encoder=FixedEncoder(), depth=2)
    store.close()
    found = peer.search("zebra", k=10)
    assert found[0] == both
    assert set(found) == {best, both, sparse}
    assert neither not in found
    # a query with no indexed term is dense only
    assert peer.search("unicorn", k=2) == [best, both]


def test_unusable_namespaces_and_encoders_are_clear_errors(settings, store, corpus):
    with pytest.raises(ValueError, match="'missing' has no vector shard"):
        PeerRetriever.from_store_copy(settings, "missing", encoder=FakeEncoder(DIM))
    with pytest.raises(ValueError, match="dim 64 vectors, the encoder makes 4"):
        PeerRetriever.from_store_copy(settings, NS, encoder=FixedEncoder())
    for i in range(len(TEXTS)):
        store.delete_document(NS, f"doc{i}")
    with pytest.raises(ValueError, match="'docs' holds no chunks"):
        PeerRetriever.from_store_copy(settings, NS, encoder=FakeEncoder(DIM))


def _in_memory(encoder: QueryEncoder) -> PeerRetriever:
    vectors = FakeEncoder(DIM).encode(TEXTS)
    ids = [f"c{i}" for i in range(len(TEXTS))]
    return PeerRetriever(ids, TEXTS, vectors, encoder)


def test_run_peer_reports_closed_loop_load():
    report = run_peer(_in_memory(FakeEncoder(DIM)), TEXTS, threads=2, duration_s=0.4, warmup_s=0.1)
    assert report["system"] == "peer"
    assert report["threads"] == 2
    assert report["chunks"] == len(TEXTS)
    assert report["completed"] > 0
    assert report["errors"] == 0
    assert report["requests"] == report["completed"]
    assert report["throughput_qps"] == pytest.approx(
        report["completed"] / report["elapsed_s"], rel=0.01
    )
    assert report["elapsed_s"] >= 0.4
    latency = report["latency_ms"]
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"]
    assert report["cpu"]["cpu_ms_per_request"] > 0


def test_run_peer_counts_failed_queries():
    report = run_peer(_in_memory(BrokenEncoder()), TEXTS, threads=2, duration_s=0.1)
    assert report["completed"] == 0
    assert report["errors"] == report["requests"] > 0
    assert report["latency_ms"]["p50"] is None
    assert "model weights are missing" in report["sample_errors"][0]


def test_compare_divides_ragbus_by_the_peer():
    ragbus = {
        "throughput_qps": 30.0,
        "cpu": {"server_cpu_ms_per_request": 45.0},
        "latency_ms": {"p95": 200.0},
    }
    peer = {
        "throughput_qps": 60.0,
        "cpu": {"cpu_ms_per_request": 15.0},
        "latency_ms": {"p95": 40.0},
    }
    assert compare(ragbus, peer) == {"qps_ratio": 0.5, "cpu_ratio": 3.0, "p95_ratio": 5.0}
    missing = compare({"throughput_qps": 1.0, "cpu": None, "latency_ms": {"p95": None}}, peer)
    assert missing["cpu_ratio"] is None
    assert missing["p95_ratio"] is None


def test_the_shard_copy_keeps_data_and_holes(tmp_path):
    source, target = tmp_path / "sparse.mmap", tmp_path / "copy.mmap"
    with source.open("wb") as f:
        f.write(b"head")
        f.seek(8 << 20)
        f.write(b"tail")
        f.truncate(16 << 20)
    _copy_sparse(str(source), str(target))
    assert target.stat().st_size == source.stat().st_size
    assert target.read_bytes() == source.read_bytes()
    assert target.stat().st_blocks * 512 < 1 << 20  # a plain copy writes 16 MB of zeros
