"""`bench.scale`: a corpus built from an ingested namespace by copying and perturbing its
stored points (`build_corpus`), and the table the scale benchmark prints. `measure` starts the
whole stack and is not run here."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.scale import channel_latencies, memory_mb, ratios, size_label, table
from bench.scale_build import SCALE_FILE, abuild_corpus, build_corpus
from bench.scale_copies import noise_sigma, perturb_text, perturb_vectors, renamed
from contracts.ingest import DocumentIn
from contracts.models import RetrievedChunk
from infra.retrieval.chunking import Chunk, chunk_document, chunk_id_for
from infra.retrieval.entities import extract_entities
from infra.retrieval.graph.embedded import EmbeddedGraphStore
from infra.retrieval.sentences import clean_sentence, sentence_spans
from infra.retrieval.sparse import Bm25Sparse
from infra.retrieval.vectors import Sentences
from infra.retrieval.vectors.codec import sentences_of
from infra.retrieval.vectors.edge import EdgeVectorStore
from infra.retrieval.vectors.points import DENSE, SPARSE
from infra.settings import Settings
from tests.unit.fakes import FakeEncoder

NS = "nfc"
DIM = 64
COPY = re.compile(r"^(?P<doc>.+)~c(?P<copy>\d+)$")

DOCS = {
    "statin": "Statin therapy lowers LDL cholesterol in adults with Type 2 Diabetes. "
    "The Framingham Heart Study followed statin users in Massachusetts for decades. "
    "Patients with high LDL cholesterol were given Atorvastatin or Simvastatin daily. "
    "Muscle pain was the side effect most often reported to the Food and Drug Administration. "
    "Later trials in Finland and Sweden confirmed the lower rate of myocardial infarction.",
    "vitd": "Vitamin D deficiency weakens bone density in older adults in Finland. "
    "The Nurses Health Study linked low Vitamin D to hip fractures among women. "
    "Sunlight in Norway is too weak in winter for the skin to make enough Vitamin D. "
    "Supplements of Vitamin D3 raised blood levels within eight weeks in most volunteers. "
    "Calcium intake mattered as much as Vitamin D for the bone density of the volunteers.",
    "soy": "Soy foods contain isoflavones such as Genistein and Daidzein in large amounts. "
    "The Shanghai Breast Cancer Survival Study followed women who ate soy after diagnosis. "
    "Women eating the most soy had a lower risk of recurrence than women eating the least. "
    "The American Cancer Society reviewed the evidence and found soy safe for survivors. "
    "Tofu and soy milk were the main sources of isoflavones in the Shanghai cohort.",
    "coffee": "Coffee drinking was studied in the Nurses Health Study and in the EPIC cohort. "
    "Drinkers of three cups a day had a lower risk of Type 2 Diabetes than abstainers. "
    "Caffeine raises blood pressure for a few hours after a cup of strong coffee. "
    "Decaffeinated coffee showed the same lower risk of Type 2 Diabetes in the EPIC data. "
    "Chlorogenic acid in coffee may explain part of the effect on glucose metabolism.",
    "fiber": "Dietary fiber from whole grains lowers LDL cholesterol by a small amount. "
    "Oat beta glucan was approved for a health claim by the Food and Drug Administration. "
    "The Iowa Womens Health Study found less heart disease among women eating more fiber. "
    "Fiber feeds the gut bacteria that make butyrate in the colon of healthy adults. "
    "Legumes such as lentils and chickpeas are rich in fiber and in plant protein.",
    "green-tea": "Green tea contains catechins such as EGCG in large amounts. "
    "The Ohsaki Cohort Study in Japan followed green tea drinkers for eleven years. "
    "Drinkers of five cups a day had a lower risk of death from heart disease. "
    "Matcha powder holds more EGCG than steeped green tea from the same leaves. "
    "Liver damage from EGCG supplements was reported to the European Food Safety Authority.",
}
NO_SENTENCES = "green-tea"
"""Stored without sentence vectors, as a document indexed before they existed."""


@dataclass
class Built:
    source_dir: Path
    out_dir: Path
    result: dict[str, Any]
    source_points: dict[str, dict[str, Any]]
    out_points: dict[str, dict[str, Any]]
    source_entities: int
    before: dict[str, tuple[int, str]]
    after: dict[str, tuple[int, str]]
    progress: list[tuple[str, int, int]] = field(default_factory=list)


def _fingerprint(root: Path) -> dict[str, tuple[int, str]]:
    return {
        str(path.relative_to(root)): (
            path.stat().st_mtime_ns,
            hashlib.sha256(path.read_bytes()).hexdigest(),
        )
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


async def _make_source(data_dir: Path) -> int:
    """Index DOCS the way ingestion does, with the fake encoder: an Edge shard, a graph left as
    its journal (no snapshot), an intent model and an encoder export. Returns its entities."""
    settings = Settings(data_dir=data_dir)
    encoder = FakeEncoder(DIM)
    sparse = Bm25Sparse()
    store = EdgeVectorStore(settings.vectors_path, DIM)
    graph = EmbeddedGraphStore(settings.graph_path)
    await asyncio.to_thread(graph.load)
    norms: set[str] = set()
    for doc_id, text in DOCS.items():
        doc = DocumentIn(id=doc_id, title=doc_id.replace("-", " ").title(), text=text, namespace=NS)
        chunks = chunk_document(doc, chunk_chars=220, overlap_chars=60)
        texts = [chunk.embedding_text for chunk in chunks]
        sentences = None
        if doc_id != NO_SENTENCES:
            sentences = []
            for chunk in chunks:
                spans = sentence_spans(chunk.text)
                rows = encoder.encode([clean_sentence(chunk.text[a:b]) for a, b in spans])
                sentences.append(Sentences(spans, rows))
        store.upsert_chunks(
            NS,
            chunks,
            encoder.encode(texts),
            sparse.documents(texts),
            doc.content_hash(),
            sentences,
        )
        entities = [extract_entities(chunk.text) for chunk in chunks]
        norms.update(e.norm for found in entities for e in found)
        await graph.upsert_document(NS, doc.id, doc.title, chunks, entities)
    store.close()
    (data_dir / "intent-model").mkdir()
    (data_dir / "intent-model" / "meta.json").write_text('{"labels": []}')
    settings.models_path.mkdir()
    (settings.models_path / "encoder.onnx").write_bytes(b"onnx")
    return len(norms)


def _points(data_dir: Path) -> dict[str, dict[str, Any]]:
    """Every stored point: payload, dense, sparse and (hydrated) sentence vectors."""
    store = EdgeVectorStore(Settings(data_dir=data_dir).vectors_path, DIM)
    try:
        points: dict[str, dict[str, Any]] = {}
        for record in store.iter_points(NS):
            points[record.id] = {
                "payload": dict(record.payload),
                "dense": np.asarray(record.vectors[DENSE], dtype=np.float32),
                "sparse": record.vectors[SPARSE],
            }
        refs = [
            RetrievedChunk(chunk_id=cid, document_id=p["payload"]["document_id"], namespace=NS)
            for cid, p in points.items()
        ]
        for chunk in store.hydrate(refs):
            vectors = chunk.vectors
            rows = sentences_of(vectors) if vectors is not None and vectors.spans else None
            points[chunk.chunk_id]["sentences"] = rows
        return points
    finally:
        store.close()


@pytest.fixture(scope="module")
async def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("scale")
    source_dir, out_dir = root / "source", root / "out"
    with pytest.MonkeyPatch.context() as patch:
        # each data directory keeps its models, as by default: the copy of them is asserted
        patch.delenv("RAGBUS_MODELS_DIR", raising=False)
        source_entities = await _make_source(source_dir)
        source_points = await asyncio.to_thread(_points, source_dir)
        before = _fingerprint(source_dir)
        progress: list[tuple[str, int, int]] = []
        result = await abuild_corpus(
            source_dir,
            NS,
            3 * len(source_points),
            out_dir,
            seed=7,
            progress=lambda stage, done, total: progress.append((stage, done, total)),
            embed=FakeEncoder(DIM).aencode,
        )
    return Built(
        source_dir,
        out_dir,
        result,
        source_points,
        await asyncio.to_thread(_points, out_dir),
        source_entities,
        before,
        _fingerprint(source_dir),
        progress,
    )


def _copies(built: Built) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    """(copy number, copy point, its original point) for every point of copies 1..n-1."""
    found = []
    for cid, point in built.out_points.items():
        if cid in built.source_points:
            continue
        payload = point["payload"]
        match = COPY.match(payload["document_id"])
        assert match, payload["document_id"]
        original_id = chunk_id_for(NS, match["doc"], payload["index"])
        found.append((int(match["copy"]), point, built.source_points[original_id]))
    return found


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


async def test_the_target_is_reached_in_whole_copies(built: Built) -> None:
    source = len(built.source_points)
    assert source >= 10  # a real source: several chunks per document
    assert built.result["chunks"] == len(built.out_points) == 3 * source
    assert built.result["copies"] == 3
    assert built.result["documents"] == 3 * len(DOCS)
    assert built.result["source_chunks"] == source
    copies = Counter(number for number, _, _ in _copies(built))
    assert copies == {1: source, 2: source}
    writes = [(done, total) for stage, done, total in built.progress if stage == "write"]
    assert writes[-1] == (3 * source, 3 * source)
    stages = list(dict.fromkeys(stage for stage, _, _ in built.progress))
    assert stages == ["read", "write", "optimize", "communities"]
    stored = json.loads((built.out_dir / SCALE_FILE).read_text())
    assert stored == built.result
    assert built.result["how"]


async def test_copy_zero_is_the_source_unchanged(built: Built) -> None:
    for cid, original in built.source_points.items():
        copy = built.out_points[cid]
        assert copy["payload"] == original["payload"]
        np.testing.assert_array_equal(copy["dense"], original["dense"])
        assert copy["sparse"] == original["sparse"]
        if original["sentences"] is None:
            assert copy["sentences"] is None
        else:
            np.testing.assert_array_equal(copy["sentences"], original["sentences"])


async def test_copies_have_their_own_ids_and_titles(built: Built) -> None:
    assert len(set(built.out_points)) == len(built.out_points)
    for number, point, original in _copies(built):
        payload = point["payload"]
        assert payload["chunk_id"] == chunk_id_for(NS, payload["document_id"], payload["index"])
        assert payload["document_id"] == f"{original['payload']['document_id']}~c{number}"
        assert payload["title"] == f"{original['payload']['title']} ~copy{number}"
        assert payload["namespace"] == NS
        assert payload["chunk_count"] == original["payload"]["chunk_count"]
        assert payload["content_hash"] != original["payload"]["content_hash"]


async def test_copies_perturb_the_text_within_each_sentence(built: Built) -> None:
    texts: dict[tuple[str, int], set[str]] = {}
    for _, point, original in _copies(built):
        text, old = point["payload"]["text"], original["payload"]["text"]
        assert text != old
        words, old_words = text.split(), old.split()
        assert not Counter(words) - Counter(old_words)  # only the original's words
        assert 0.7 * len(old_words) <= len(words) <= len(old_words)
        texts.setdefault((original["payload"]["chunk_id"], 0), {old}).add(text)
        spans = [tuple(s) for s in point["payload"]["spans"]]
        old_spans = [tuple(s) for s in original["payload"]["spans"]]
        assert len(spans) == len(old_spans)
        for (a, b), (c, d) in zip(spans, old_spans, strict=True):
            sentence, old_sentence = text[a:b].split(), old[c:d].split()
            assert (sentence[0], sentence[-1]) == (old_sentence[0], old_sentence[-1])
            assert not Counter(sentence) - Counter(old_sentence)
    assert all(len(found) == 3 for found in texts.values())  # copies differ from each other


async def test_sparse_vectors_are_those_of_the_perturbed_text(built: Built) -> None:
    bm25 = Bm25Sparse()
    for _, point, _ in _copies(built):
        payload = point["payload"]
        chunk = Chunk(
            chunk_id=payload["chunk_id"],
            document_id=payload["document_id"],
            namespace=NS,
            title=payload["title"],
            source=payload["source"],
            index=payload["index"],
            text=payload["text"],
            heading=payload["heading"],
        )
        want_indices, want_values = bm25.documents([chunk.embedding_text])[0]
        indices, values = point["sparse"]
        assert dict(zip(indices, values, strict=True)) == pytest.approx(
            dict(zip(want_indices, want_values, strict=True)), rel=1e-5
        )


async def test_dense_and_sentence_vectors_stay_near_the_originals(built: Built) -> None:
    cosines = []
    for _, point, original in _copies(built):
        assert float(np.linalg.norm(point["dense"])) == pytest.approx(1.0, abs=1e-4)
        cosine = _cosine(point["dense"], original["dense"])
        assert 0.88 < cosine < 0.995
        cosines.append(cosine)
        if original["sentences"] is None:
            assert point["sentences"] is None
            assert point["payload"]["spans"] == []
            continue
        assert point["sentences"].shape == original["sentences"].shape
        for row, old_row in zip(point["sentences"], original["sentences"], strict=True):
            assert 0.85 < _cosine(row, old_row) < 0.999
    assert np.mean(cosines) == pytest.approx(0.95, abs=0.015)
    assert built.result["mean_cosine_to_original"] == pytest.approx(np.mean(cosines), abs=2e-3)
    assert built.result["dense_noise_sigma"] == pytest.approx(noise_sigma(DIM), abs=1e-6)
    assert any(original["sentences"] is None for _, _, original in _copies(built))


async def test_the_graph_grows_with_renamed_and_shared_entities(built: Built) -> None:
    graph = EmbeddedGraphStore(Settings(data_dir=built.out_dir).graph_path)
    await asyncio.to_thread(graph.load)
    try:
        stats = await graph.stats()
        assert stats["chunks"] == built.result["chunks"]
        assert stats["documents"] == built.result["documents"]
        assert stats["entities"] == built.result["entities"]
        assert built.source_entities == built.result["source_entities"]
        assert built.source_entities * 1.5 < stats["entities"] < built.source_entities * 3
        assert not stats["communities_dirty"]
        assert stats["communities"] == built.result["communities"] > 0
        pairs = _copies(built)
        entities = await graph.chunk_entities(
            [p["payload"]["chunk_id"] for _, p, _ in pairs]
            + [o["payload"]["chunk_id"] for _, _, o in pairs]
        )
        kept: list[tuple[str, str, str]] = []
        renamed_count = 0
        for number, point, original in pairs:
            copy_id, original_id = point["payload"]["chunk_id"], original["payload"]["chunk_id"]
            copy_norms = [n for n, _ in entities[copy_id]]
            old_norms = [n for n, _ in entities[original_id]]
            assert len(copy_norms) == len(old_norms)
            for norm, old in zip(copy_norms, old_norms, strict=True):
                if norm == old:
                    kept.append((norm, copy_id, original_id))
                    assert not renamed(old, number, 7)
                else:
                    renamed_count += 1
                    assert norm == f"{old} copy{number}"
        assert kept and renamed_count
        for norm, copy_id, original_id in kept:  # shared entities gather every copy's mentions
            mentions = (await graph.mentions([f"{NS}|{norm}"]))[f"{NS}|{norm}"]
            assert {copy_id, original_id} <= set(mentions)
    finally:
        await graph.aclose()


async def test_the_source_is_left_alone_and_its_models_copied(built: Built) -> None:
    assert built.after == built.before
    assert not (Settings(data_dir=built.source_dir).graph_path / "graph.json").exists()
    assert (built.out_dir / "intent-model" / "meta.json").read_text() == '{"labels": []}'
    assert (built.out_dir / "models" / "encoder.onnx").read_bytes() == b"onnx"
    assert built.result["intent_model_copied"] and built.result["encoder_export_copied"]


async def test_a_used_data_dir_is_refused(built: Built, tmp_path: Path) -> None:
    (tmp_path / "something").write_text("x")
    with pytest.raises(FileExistsError):
        await asyncio.to_thread(build_corpus, built.source_dir, NS, 10, tmp_path)
    with pytest.raises(ValueError, match="another data directory"):
        await asyncio.to_thread(build_corpus, built.source_dir, NS, 10, built.source_dir)


# --------------------------------------------------------------------------- pure parts


def test_perturbed_text_keeps_sentence_edges_and_spans() -> None:
    text = "Alpha beta gamma delta epsilon zeta eta. Theta iota kappa lambda mu nu xi omicron."
    spans = sentence_spans(text)
    for seed in range(50):
        new, new_spans = perturb_text(text, spans, random.Random(seed))
        assert new != text
        assert len(new_spans) == 2
        assert [new[a:b].split()[0] for a, b in new_spans] == ["Alpha", "Theta"]
        assert [new[a:b].split()[-1] for a, b in new_spans] == ["eta.", "omicron."]
        assert sentence_spans(new) == new_spans
    again = perturb_text(text, spans, random.Random(3))
    assert again == perturb_text(text, spans, random.Random(3))
    assert perturb_text("Two words", [], random.Random(1)) == ("Two words", [])


def test_noise_gives_the_cosine_it_was_chosen_for() -> None:
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(500, 384)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    noisy, cosines = perturb_vectors(rows, noise_sigma(384), rng)
    assert np.linalg.norm(noisy, axis=1) == pytest.approx(np.ones(500), abs=1e-5)
    assert float(cosines.mean()) == pytest.approx(0.95, abs=0.003)
    assert float(cosines.min()) > 0.93


def test_half_the_entities_are_renamed_per_copy() -> None:
    norms = [f"entity {i}" for i in range(4000)]
    share = sum(renamed(norm, 1, 0) for norm in norms) / len(norms)
    assert share == pytest.approx(0.5, abs=0.03)
    assert not any(renamed(norm, 0, 0) for norm in norms)
    assert [renamed(n, 1, 0) for n in norms[:50]] != [renamed(n, 2, 0) for n in norms[:50]]


def test_table_has_a_line_per_size() -> None:
    report = {
        "phases": {
            "vector_search": {"p50_ms": 0.5, "p95_ms": 1.25, "count": 10},
            "sparse_search": {"p50_ms": 0.7, "p95_ms": 2.0, "count": 10},
        },
        "latency_ms": {"p50": 812.0, "p95": 1490.5, "p99": 2000.0},
        "throughput_qps": 2.5,
        "corpus": {"target_chunks": 100_000, "chunks": 100_002, "entities": 45_000},
        "cpu": {
            "process_cpu_ms_per_request": {"ragbus": 12.25, "ragbus-child": 20.5},
            "server_cores_busy": 1.834,
        },
        "memory_mb": {"processes": {"ragbus-child": {"rss": 2560.0, "peak": 2600.0}}, "all": 4096},
    }
    assert channel_latencies(report)["sparse"] == {"p50_ms": 0.7, "p95_ms": 2.0, "count": 10}
    bare = {k: v for k, v in report.items() if k not in ("cpu", "memory_mb")}
    lines = table([report, {**bare, "size": "own", "throughput_qps": None}]).splitlines()
    assert len(lines) == 4
    assert lines[0].count("|") == lines[2].count("|") == 13
    assert lines[2] == (
        "| 100k | 100,002 | 45,000 | 0.5 / 1.2 | 0.7 / 2.0 | – / – | 812.0 | 1,490.5 | 2.50 "
        "| 12.2 / 20.5 | 1.83 | 2.5 / 4.0 |"
    )
    assert lines[3].startswith("| own |") and lines[3].endswith("| – | – / – | – | – / – |")
    assert [size_label(n) for n in (9_299, 10_000, 300_000)] == ["9.3k", "10k", "300k"]


def test_a_row_with_a_search_replica_shows_the_owner_and_the_replica() -> None:
    report = {
        "size": "300k",
        "search_replicas": 1,
        "latency_ms": {"p50": 200.0, "p95": 300.0},
        "throughput_qps": 35.0,
        "cpu": {
            "process_cpu_ms_per_request": {
                "ragbus": 15.0,
                "ragbus-child": 16.8,
                "ragbus-replica": 13.2,
            },
            "server_cores_busy": 1.8,
        },
        "memory_mb": {
            "processes": {
                "ragbus-child": {"rss": 5120.0, "peak": 5120.0},
                "ragbus-replica": {"rss": 5120.0, "peak": 5120.0},
            },
            "all": 11264,
        },
    }
    line = table([report]).splitlines()[2]
    assert line.startswith("| 300k, 1 replica(s) |")
    assert line.endswith("| 35.00 | 15.0 / 16.8 + 13.2 | 1.80 | 10.0 / 11.0 |")


def test_the_stack_names_its_search_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.stack as stack

    tree = {1: [2, 3], 2: [4, 5], 3: []}
    monkeypatch.setattr(stack, "child_pids", lambda pid: tree.get(pid, []))
    monkeypatch.setattr(stack, "is_replica", lambda pid: pid == 5)
    assert stack.stack_pids(1) == {
        "ragbus": 1,
        "ragbus-child": 2,
        "ragbus-child-2": 3,
        "ragbus-replica": 5,
    }


def test_ratios_are_against_the_first_size_of_the_run() -> None:
    def row(size: str, qps: float, p95: float, child: float | None) -> dict[str, object]:
        per = {"ragbus-child": child} if child is not None else {}
        return {
            "size": size,
            "throughput_qps": qps,
            "latency_ms": {"p95": p95},
            "cpu": {"process_cpu_ms_per_request": per},
        }

    rows = [row("10k", 50.0, 200.0, 20.0), row("300k", 40.0, 290.0, 25.0), row("1M", 0, 1, None)]
    assert ratios(rows) == {
        "300k": {"throughput": 0.8, "p95": 1.45, "stores_cpu_per_request": 1.25},
        "1M": {"throughput": None, "p95": 0.005, "stores_cpu_per_request": None},
    }
    assert ratios(rows[:1]) == {} and ratios([]) == {}


def test_memory_is_read_of_live_processes_and_their_children() -> None:
    import os

    found = memory_mb({"me": os.getpid(), "gone": 2**22 + 7})
    me = found["processes"]["me"]
    assert "gone" not in found["processes"]
    assert 0 < me["rss"] <= me["peak"] and found["all"] >= me["rss"]


def test_a_size_past_the_memory_available_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.scale as scale

    measured = [
        {"corpus": {"chunks": 10_000}, "memory_mb": {"all": 1_300.0}},
        {"corpus": {"chunks": 0}, "memory_mb": {"all": 900.0}},  # no corpus: not on the line
        {"corpus": {"chunks": 300_000}, "memory_mb": {"all": 5_800.0}},
    ]
    # on the line through the two: 4.5 GB more for 290k chunks more
    per_chunk = 4_500 / 290_000
    assert scale.memory_needed_mb(measured, 1_000_000) == pytest.approx(5_800 + per_chunk * 700_000)
    assert scale.memory_needed_mb(measured, 100_000) == 5_800.0  # never below what was seen
    assert scale.memory_needed_mb(measured[:1], 1_000_000) is None  # one size: no line
    assert scale.memory_needed_mb([], 1_000_000) is None
    monkeypatch.setattr(scale, "available_mb", lambda: 15_000.0)
    reason = scale.too_big(measured, 1_000_000)
    assert reason is not None and "16.3 GB" in reason and "14.6 GB available" in reason
    assert scale.too_big(measured, 600_000) is None  # 10.5 GB of 15
    assert scale.too_big(measured[:1], 10_000_000) is None  # nothing to scale from: tried
    monkeypatch.setattr(scale, "available_mb", lambda: None)
    assert scale.too_big(measured, 1_000_000) is None


def test_sizes_are_read_in_thousands_and_millions() -> None:
    from cli.bench_scale import _chunk_count

    assert [_chunk_count(s) for s in ("10k", "12.5k", "1M", " 1.5m ", "9299")] == [
        10_000,
        12_500,
        1_000_000,
        1_500_000,
        9_299,
    ]
    with pytest.raises(ValueError, match="not a corpus size"):
        _chunk_count("0.0001k")
