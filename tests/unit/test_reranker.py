"""The optional cross-encoder: it loads from a local directory (a tiny model the tests build),
reorders passages by its score, and the fuse worker uses it only when one is configured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from faststream.nats import NatsBroker

from contracts import subjects as sj
from contracts.commands import FuseCommand
from contracts.enums import Channel, Step
from contracts.models import RetrievedChunk
from contracts.results import FuseResult
from engines.fuse.rerank import passage_text, rerank
from engines.fuse.rrf import fuse, weighted_rrf
from infra.retrieval.reranker import Reranker, load_reranker
from infra.runtime.bus import Bus
from infra.runtime.resources import Resources
from infra.settings import Settings
from tests.unit.conftest import WorkerHarness, worker_harness
from workers.fuse import create_router

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
QUERY = "How do statins lower cholesterol?"
TEXTS = [
    "Statins lower LDL cholesterol in adults with heart disease.",
    "Vitamin D deficiency weakens bone density during the winter.",
    "Knead the dough for ten minutes and bake the bread.",
    "JetStream stores messages in streams on disk.",
    "Redis keeps the saga state of every request.",
    "The Panama Canal links the Atlantic with the Pacific.",
]
CHUNKS = [
    RetrievedChunk(chunk_id=f"c{i}", document_id=f"d{i}", title=f"T{i}", text=text)
    for i, text in enumerate(TEXTS)
]


class FakeScorer:
    """Scores passages by a fixed table keyed by their text."""

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table
        self.seen: list[list[str]] = []

    async def ascore(self, query: str, passages: list[str]) -> list[float]:
        self.seen.append(passages)
        return [self.table[p] for p in passages]


async def test_rerank_reorders_the_head_and_keeps_the_tail_in_fused_order() -> None:
    fused = weighted_rrf({Channel.VECTOR: CHUNKS}, {Channel.VECTOR: 1.0}, top_k=6)
    table = {
        passage_text(c): s for c, s in zip(CHUNKS, [0.1, 0.2, 0.9, 0.5, 0.7, 0.3], strict=True)
    }
    scorer = FakeScorer(table)
    out, n = await rerank(scorer, QUERY, fused, top_n=4)
    assert n == 4 and len(scorer.seen[0]) == 4
    assert [c.chunk_id for c in out] == ["c2", "c3", "c1", "c0", "c4", "c5"]
    assert [c.rank for c in out] == [1, 2, 3, 4, 5, 6]
    assert [c.score for c in out[:4]] == [0.9, 0.5, 0.2, 0.1]
    assert out[4].score == fused[4].score  # the tail keeps its RRF score
    assert out[0].channels == {"vector": 3}
    assert await rerank(scorer, QUERY, [], top_n=4) == ([], 0)


def test_the_reranker_loads_and_scores(tiny_reranker: Path, tmp_path: Path) -> None:
    assert load_reranker(Settings(data_dir=tmp_path)) is None
    reranker = load_reranker(Settings(data_dir=tmp_path, reranker_path=tiny_reranker))
    assert isinstance(reranker, Reranker)
    scores = reranker.score(QUERY, TEXTS)
    assert len(scores) == len(TEXTS) and all(0.0 < s < 1.0 for s in scores)
    assert len(set(scores)) == len(scores)  # distinct: an order exists
    assert reranker.score(QUERY, TEXTS[:1]) == pytest.approx(scores[:1], abs=1e-6)
    assert reranker.score(QUERY, []) == []
    with pytest.raises(FileNotFoundError, match="not found"):
        load_reranker(Settings(data_dir=tmp_path, reranker_path=tmp_path / "nowhere"))


async def test_resources_give_the_reranker_only_when_configured(
    tiny_reranker: Path, tmp_path: Path
) -> None:
    off = Resources(Settings(data_dir=tmp_path), Bus(NatsBroker()))
    assert await off.reranker() is None
    on = Resources(Settings(data_dir=tmp_path, reranker_path=tiny_reranker), Bus(NatsBroker()))
    first = await on.reranker()
    assert first is not None and await on.reranker() is first


def _fuse_command(ranking: list[RetrievedChunk], top_k: int) -> FuseCommand:
    return FuseCommand(
        request_id="req-rerank",
        query=QUERY,
        weights={Channel.VECTOR: 0.6, Channel.SPARSE: 0.4},
        results={Channel.VECTOR: ranking, Channel.SPARSE: ranking[:2]},
        top_k=top_k,
    )


async def _fuse(h: WorkerHarness, cmd: FuseCommand) -> tuple[FuseResult, dict[str, object]]:
    await h.publish(cmd, sj.cmd_subject(Step.FUSE), sj.STREAM_CMD)
    [body] = h.on("rag.res.")
    assert h.on("rag.dlq.") == []
    completed = h.on("rag.events.")[-1]["data"]
    assert completed["status"] == "completed"
    result = FuseResult.model_validate(body)
    assert all(chunk.claimed for chunk in result.chunks)  # the passages wait in the claims
    whole = (await h.resources.claims().resolve(cmd.request_id, result.chunks)).chunks
    return result.model_copy(update={"chunks": whole}), completed["metadata"]


@pytest.mark.parametrize(("top_n", "top_k"), [(4, 6), (6, 2)])
async def test_the_fuse_worker_reranks_when_configured(
    tiny_reranker: Path, tmp_path: Path, top_n: int, top_k: int
) -> None:
    reranker = load_reranker(Settings(data_dir=tmp_path, reranker_path=tiny_reranker))
    assert reranker is not None
    # The channels rank the chunks worst-first by the reranker's own score, so RRF and the
    # cross-encoder disagree everywhere.
    by_text = dict(
        zip(TEXTS, reranker.score(QUERY, [passage_text(c) for c in CHUNKS]), strict=True)
    )
    ranking = sorted(CHUNKS, key=lambda c: by_text[c.text])
    cmd = _fuse_command(ranking, top_k)
    fused = fuse(cmd.results, cmd.weights, method=cmd.fusion, k=cmd.rrf_k, top_k=max(top_k, top_n))
    head = fused[:top_n]
    expected_scores = reranker.score(QUERY, [passage_text(c) for c in head])
    expected = [
        c.chunk_id for _, c in sorted(zip(expected_scores, head, strict=True), key=lambda p: -p[0])
    ]
    expected = (expected + [c.chunk_id for c in fused[top_n:]])[:top_k]

    settings = Settings(data_dir=tmp_path, reranker_path=tiny_reranker, rerank_top_n=top_n)
    async with worker_harness(create_router, settings) as h:
        result, metadata = await _fuse(h, cmd)
    ids = [c.chunk_id for c in result.chunks]
    assert ids == expected
    assert ids != [c.chunk_id for c in fused[:top_k]]  # the order did change
    assert metadata["reranked"] == top_n
    assert metadata["fused"] == top_k
    assert [c.rank for c in result.chunks] == list(range(1, top_k + 1))
    reranked = result.chunks[: min(top_n, top_k)]
    assert [c.score for c in reranked] == pytest.approx(
        sorted(expected_scores, reverse=True)[: len(reranked)]
    )
    assert all(0 < c.score < 1 for c in reranked)


async def test_the_fuse_worker_is_unchanged_without_a_reranker(tmp_path: Path) -> None:
    cmd = _fuse_command(CHUNKS, top_k=4)
    async with worker_harness(create_router, Settings(data_dir=tmp_path)) as h:
        result, metadata = await _fuse(h, cmd)
    assert result.chunks == fuse(cmd.results, cmd.weights, method=cmd.fusion, k=cmd.rrf_k, top_k=4)
    assert "reranked" not in metadata and "rerank_error" not in metadata


async def test_a_broken_reranker_leaves_the_fused_order(tmp_path: Path) -> None:
    cmd = _fuse_command(CHUNKS, top_k=3)
    settings = Settings(data_dir=tmp_path, reranker_path=tmp_path / "no-such-reranker")
    async with worker_harness(create_router, settings) as h:
        result, metadata = await _fuse(h, cmd)
    assert result.chunks == fuse(cmd.results, cmd.weights, method=cmd.fusion, k=cmd.rrf_k, top_k=3)
    assert "no-such-reranker" in str(metadata["rerank_error"])


def test_the_fuse_worker_imports_no_model_library() -> None:
    code = (
        "import sys, workers.fuse, infra.runtime.resources, infra.retrieval.reranker, "
        "infra.retrieval.bge_m3, infra.retrieval.sparse; "
        "heavy = [m for m in ('FlagEmbedding', 'torch', 'transformers') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
