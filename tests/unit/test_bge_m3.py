"""BGE-M3 through FlagEmbedding, on a tiny model the tests build themselves (random weights):
loading through `Resources`, dense and sparse vectors, the refusal of a model without its
heads, and indexing + search with the learned sparse vectors in a local Qdrant."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from faststream.nats import NatsBroker

from contracts.commands import SearchCommand
from contracts.enums import Channel
from contracts.ingest import DocumentIn
from engines.search.channels import search_sparse, search_vector
from infra.retrieval.bge_m3 import BgeM3Encoder, lexical_to_sparse, load_bge_m3
from infra.retrieval.sparse import Bm25Sparse, SparseModel
from infra.retrieval.vectors.edge import _stored_kind
from infra.runtime.bus import Bus
from infra.runtime.resources import Resources
from infra.settings import Settings
from tests.unit.tiny_models import HIDDEN, build_bge_m3
from workers.ingest.indexer import index_document

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DOCS = [
    DocumentIn(id="statins", title="Statins", text="Statins lower LDL cholesterol in adults."),
    DocumentIn(id="vitd", title="Vitamin D", text="Vitamin D deficiency weakens bone density."),
    DocumentIn(
        id="bread", title="Baking", text="Knead the dough for ten minutes and bake the bread."
    ),
]


def _resources(settings: Settings) -> Resources:
    return Resources(settings, Bus(NatsBroker()))


def test_lexical_weights_become_sorted_int_indices() -> None:
    weights = {"17": np.float32(0.5), "3": np.float32(1.25), "9": 0.0}
    assert lexical_to_sparse(weights) == ([3, 17], [1.25, 0.5])
    assert lexical_to_sparse({}) == ([], [])


async def test_resources_load_one_model_for_dense_and_sparse(
    tiny_bge_m3: Path, tmp_path: Path
) -> None:
    resources = _resources(Settings(data_dir=tmp_path, bge_m3_path=tiny_bge_m3))
    try:
        encoder = await resources.encoder()
        assert isinstance(encoder, BgeM3Encoder)
        sparse = await resources.sparse()
        assert sparse is encoder and isinstance(sparse, SparseModel)
        assert sparse.idf_modifier is False
        assert encoder.dim == HIDDEN and encoder.name == tiny_bge_m3.name

        texts = ["Statins lower cholesterol.", "Who designed the Gatun Locks?", "bread"]
        dense = await encoder.aencode(texts)
        assert dense.shape == (3, HIDDEN) and dense.dtype == np.float32
        assert np.allclose(np.linalg.norm(dense, axis=1), 1.0, atol=1e-5)
        assert encoder.encode([]).shape == (0, HIDDEN)
        assert np.allclose(encoder.encode(texts[:1])[0], dense[0], atol=1e-5)

        docs = encoder.encode_sparse_documents(texts)
        assert len(docs) == 3
        for indices, values in docs:
            assert indices and len(indices) == len(values)
            assert all(type(i) is int for i in indices) and indices == sorted(indices)
            assert all(type(v) is float and v > 0 for v in values)
        indices, values = encoder.encode_sparse_query("statins cholesterol")
        assert indices and all(type(i) is int for i in indices)
        assert encoder.encode_sparse_documents([]) == []

        joint_dense, joint_sparse = encoder.encode_dense_sparse(texts)
        assert np.allclose(joint_dense, dense, atol=1e-5)
        assert [i for i, _ in joint_sparse] == [i for i, _ in docs]
    finally:
        await resources.aclose()


async def test_without_bge_m3_the_sparse_model_is_bm25(tmp_path: Path) -> None:
    resources = _resources(Settings(data_dir=tmp_path))
    sparse = await resources.sparse()
    assert isinstance(sparse, Bm25Sparse) and sparse.idf_modifier is True
    assert await resources.sparse() is sparse
    assert await resources.reranker() is None


def test_a_model_without_its_sparse_head_is_refused(tiny_bge_m3: Path, tmp_path: Path) -> None:
    headless = tmp_path / "headless"
    shutil.copytree(tiny_bge_m3, headless)
    (headless / "sparse_linear.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"lacks sparse_linear\.pt"):
        load_bge_m3(Settings(data_dir=tmp_path, bge_m3_path=headless))


def test_a_model_built_without_heads_and_a_missing_dir_are_refused(tmp_path: Path) -> None:
    bare = build_bge_m3(tmp_path / "bare", heads=False)
    with pytest.raises(FileNotFoundError, match=r"sparse_linear\.pt, colbert_linear\.pt"):
        load_bge_m3(Settings(data_dir=tmp_path, bge_m3_path=bare))
    with pytest.raises(FileNotFoundError, match="not found"):
        load_bge_m3(Settings(data_dir=tmp_path, bge_m3_path=tmp_path / "nowhere"))


async def test_index_and_search_with_learned_sparse_vectors(
    tiny_bge_m3: Path, tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path, bge_m3_path=tiny_bge_m3)
    resources = _resources(settings)
    try:
        for doc in DOCS:
            outcome = await index_document(resources, doc)
            assert outcome.status == "done" and outcome.chunks == 1
        assert (await index_document(resources, DOCS[0])).status == "unchanged"

        vectors = await resources.vectors()
        assert (vectors.dim, vectors.sparse_idf) == (HIDDEN, False)
        # the shard was made for learned weights: no IDF modifier, BGE-M3's dense size
        assert _stored_kind(settings.vectors_path / "default") == (HIDDEN, False)

        def command(query: str) -> SearchCommand:
            return SearchCommand(
                request_id="r", query=query, channel=Channel.SPARSE, namespaces=["default"], top_k=3
            )

        # random weights, but every weight is positive and only shared tokens count: the
        # document that holds the query's words comes first
        hits = (await search_sparse(resources, command("Knead the dough, bake the bread"))).chunks
        assert hits and hits[0].document_id == "bread"
        hits = (await search_sparse(resources, command("LDL cholesterol statins"))).chunks
        assert hits and hits[0].document_id == "statins"
        dense = await search_vector(resources, command("LDL cholesterol statins"))
        assert {h.document_id for h in dense.chunks} == {"statins", "vitd", "bread"}
        assert dense.query_vector is not None  # no classify here: the channel encoded it
    finally:
        await resources.aclose()
