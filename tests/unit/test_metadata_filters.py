"""Metadata filters: the language (`contracts.filters`) and every vector store backend held to
it: over random documents and random filters, a filtered search finds exactly the matching
chunks (all of them when `top_k` allows), and nothing else."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qdrant_client import QdrantClient

from bench.filter_cases import random_filter, random_metadata
from contracts.filters import (
    MAX_FILTER_CONDITIONS,
    FilterError,
    canonical,
    matches,
    parse_filter,
)
from contracts.ingest import DocumentIn
from infra.retrieval.chunking import chunk_document
from infra.retrieval.lexical import SparseEncoder
from infra.retrieval.vectors import VectorStore, open_vector_store
from infra.retrieval.vectors.qdrant import QdrantVectorStore
from infra.settings import Settings

DIM = 8


def test_equality_lists_numbers_and_booleans() -> None:
    meta = {"kind": "memo", "tags": ["a", "b"], "year": 2020.0, "public": True, "n": 1}
    assert matches(parse_filter({"kind": "memo"}), meta)
    assert matches(parse_filter({"tags": "b"}), meta)  # any item of a list
    assert matches(parse_filter({"year": 2020}), meta)  # 2020 is 2020.0
    assert matches(parse_filter({"public": True}), meta)
    assert not matches(parse_filter({"n": True}), meta)  # true is not 1
    assert not matches(parse_filter({"public": 1}), meta)
    assert not matches(parse_filter({"kind": "Memo"}), meta)  # exact, case too
    assert matches(parse_filter({"tags": {"$nin": ["c"]}, "kind": {"$ne": "x"}}), meta)
    assert not matches(parse_filter({"tags": {"$ne": "a"}}), meta)  # no item may equal
    assert matches(parse_filter({"missing": {"$ne": "x"}}), meta)
    assert matches(parse_filter({"missing": {"$exists": False}}), meta)
    assert not matches(parse_filter({"missing": {"$exists": True}}), meta)
    assert not matches(parse_filter({"empty": {"$exists": True}}), {"empty": []})
    assert not matches(parse_filter({"none": {"$exists": True}}), {"none": None})


def test_ranges_compare_numbers_and_dates_never_strings() -> None:
    meta = {"year": 2021, "day": "2024-05-01", "at": "2024-05-01T10:00:00+02:00", "s": "2030"}
    assert matches(parse_filter({"year": {"$gte": 2021, "$lt": 2022}}), meta)
    assert not matches(parse_filter({"s": {"$gt": 2000}}), meta)  # a string is no number
    assert matches(parse_filter({"day": {"$gte": "2024-05-01", "$lt": "2024-05-02"}}), meta)
    assert matches(parse_filter({"at": {"$lt": "2024-05-01T09:00:00Z"}}), meta)  # 08:00 UTC
    assert not matches(parse_filter({"year": {"$gt": "2020-01-01"}}), meta)  # a number no date


def test_nested_paths_and_combinations() -> None:
    meta = {"file": {"author": "Ada", "pages": 12}, "kind": "paper"}
    assert matches(parse_filter({"file.author": "Ada"}), meta)
    assert matches(parse_filter({"$or": [{"kind": "memo"}, {"file.pages": {"$gt": 10}}]}), meta)
    assert not matches(parse_filter({"$not": {"file.author": {"$in": ["Ada", "Bo"]}}}), meta)
    # a list on the way reaches nothing (Qdrant's `a.b` is not `a[].b`)
    assert not matches(parse_filter({"a.b": 1}), {"a": [{"b": 1}]})


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ([], "a filter is a JSON object"),
        ({}, "empty object"),
        ({"$where": "1"}, "unknown operator"),
        ({"year": {"$regex": "x"}}, "unknown operator '$regex'"),
        ({"year": {"$gt": "soon"}}, "a number or an ISO 8601 date"),
        ({"year": {"$gt": True}}, "a number or an ISO 8601 date"),
        ({"year": None}, "null is not a value"),
        ({"year": {"$in": []}}, "non-empty list"),
        ({"year": {"$in": 3}}, "non-empty list"),
        ({"a": {"$exists": "yes"}}, "true or false"),
        ({"$or": {"a": 1}}, "non-empty list of filters"),
        ({"a b": 1}, "a field is a metadata key"),
        ({"a.b.c.d.e": 1}, "a field is a metadata key"),
        ({"year": {"$gt": float("nan")}}, "finite"),
        ({"year": {"$gt": 1, "b": 2}}, "mixes operators and keys"),
        ({"a": [1, 2]}, "compares with a string"),
        (
            {"$and": [{"$and": [{"$and": [{"$and": [{"$and": [{"$not": {"a": 1}}]}]}]}]}]},
            "nested more than",
        ),
    ],
)
def test_a_bad_filter_says_where_and_what(raw: Any, says: str) -> None:
    with pytest.raises(FilterError, match=None) as caught:
        parse_filter(raw)
    assert says in str(caught.value)


def test_bounds_on_size() -> None:
    with pytest.raises(FilterError, match="more than"):
        parse_filter({"$or": [{f"f{i}": i} for i in range(MAX_FILTER_CONDITIONS + 1)]})
    with pytest.raises(FilterError, match="more than 256 values"):
        parse_filter({"a": {"$in": list(range(300))}})
    with pytest.raises(FilterError, match="characters"):
        parse_filter({"a": "x" * 501})
    with pytest.raises(FilterError, match="lists hold more than 1024 values"):
        parse_filter({"$or": [{f"f{i}": {"$in": list(range(256))}} for i in range(5)]})


def test_a_large_filter_decides_as_its_parts_do() -> None:
    # 63 conditions, 888 listed values: each document is one set lookup a value and condition
    lists = [{f"f{i}": {"$in": [f"v{j}" for j in range(256)]}} for i in range(3)]
    rest = [{f"g{i}": {"$nin": [i, i + 1]}} for i in range(60)]
    tree = parse_filter({"$or": [*lists, {"$and": rest}]})
    documents = [{"f1": f"v{n % 300}", "g3": n % 7, "tags": ["a"] * 5} for n in range(4000)]
    either = [
        meta
        for meta in documents
        if matches(parse_filter(lists[1]), meta) or matches(parse_filter({"$and": rest}), meta)
    ]
    assert [meta for meta in documents if matches(tree, meta)] == either
    assert 0 < len(either) < len(documents)


def test_canonical_is_one_spelling_that_parses_to_the_same_filter() -> None:
    one = canonical({"year": {"$gte": 2020.0, "$lt": 2022}, "kind": "memo"})
    assert one == {
        "$and": [{"kind": {"$eq": "memo"}}, {"year": {"$gte": 2020}}, {"year": {"$lt": 2022}}]
    }
    assert canonical({"kind": "memo", "$and": [{"year": {"$lt": 2022, "$gte": 2020}}]}) == one
    assert canonical(one) == one
    assert canonical({"d": {"$gt": "2024-05-01T12:00:00+02:00"}}) == {
        "d": {"$gt": "2024-05-01T10:00:00Z"}
    }
    rng = random.Random(3)
    for _ in range(200):
        raw = random_filter(rng)
        assert canonical(canonical(raw)) == canonical(raw)


# ---------------------------------------------------------------- the stores, against the oracle

DOCUMENTS = 80


@pytest.fixture(params=["edge", "qdrant-local"])
def filled(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[VectorStore, dict]]:
    """A store of each backend with `DOCUMENTS` documents of random metadata, two chunks each."""
    if request.param == "edge":
        store = open_vector_store(Settings(data_dir=tmp_path), DIM)
    else:
        store = QdrantVectorStore(QdrantClient(path=str(tmp_path / "local")), DIM)
    rng = random.Random(11)
    sparse = SparseEncoder()
    metadata: dict[str, dict[str, Any]] = {}
    for i in range(DOCUMENTS):
        meta = random_metadata(rng)
        doc = DocumentIn(
            id=f"doc-{i}",
            title=f"doc {i}",
            text=f"Alpha common words {i}. " * 12 + f"Beta shared text {i}. " * 12,
            metadata=meta,
            namespace="filters",
        )
        chunks = chunk_document(doc, chunk_chars=300, overlap_chars=0)[:2]
        dense = np.asarray([rng.random() for _ in range(DIM * len(chunks))], np.float32)
        dense = dense.reshape(len(chunks), DIM)
        vectors = [sparse.encode_document(c.text) for c in chunks]
        store.upsert_chunks("filters", chunks, dense, vectors, doc.content_hash(), None, meta)
        metadata[doc.id] = meta
    store.optimize()
    yield store, metadata
    store.close()


def test_every_backend_finds_exactly_the_matching_chunks(filled: tuple[VectorStore, dict]) -> None:
    store, metadata = filled
    rng = random.Random(5)
    query = np.ones(DIM, np.float32)
    indices, values = SparseEncoder().encode_query("alpha common words")
    checked = 0
    for _ in range(150):
        raw = random_filter(rng)
        where = parse_filter(canonical(raw))
        expected = {doc for doc, meta in metadata.items() if matches(where, meta)}
        dense = store.search_dense(["filters"], query, 1000, where)
        found = {hit.document_id for hit in dense}
        assert found == expected, raw
        assert len(dense) == 2 * len(expected)  # every matching chunk, nothing else
        sparse_hits = store.search_sparse(["filters"], indices, values, 1000, where)
        assert {hit.document_id for hit in sparse_hits} == expected, raw
        assert store.matching_documents("filters", where) == expected, raw
        top = store.search_dense(["filters"], query, 5, where)
        assert len(top) == min(5, 2 * len(expected))  # a short filter still fills top_k
        checked += bool(expected) and len(expected) < DOCUMENTS
    assert checked > 60  # most filters keep some documents and drop others


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(["$and", "$or", "$not", "$in", "$gt", "$exists", "2024-05-01", "a.b"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(max_size=8)
            | st.sampled_from(["$and", "$or", "$not", "$eq", "$in", "$lte", "a"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(raw=JSON, metadata=st.dictionaries(st.sampled_from(["a", "b", "$in"]), JSON, max_size=3))
def test_any_json_is_a_filter_or_a_filter_error_and_never_breaks_matching(
    raw: Any, metadata: dict[str, Any]
) -> None:
    try:
        tree = parse_filter(raw)
    except FilterError:
        return
    once = canonical(raw)
    assert canonical(once) == once  # one spelling
    assert matches(parse_filter(once), metadata) == matches(tree, metadata)


def test_writes_after_a_filtered_search_are_seen_by_the_next(
    filled: tuple[VectorStore, dict],
) -> None:
    # Edge decides filters from a table of the documents' metadata, kept by its own writes
    store, metadata = filled
    where = parse_filter({"kind": "unheard-of"})
    query = np.ones(DIM, np.float32)
    assert store.search_dense(["filters"], query, 10, where) == []
    doc = DocumentIn(
        id="late", title="late", text="Alpha late words. " * 10, metadata={"kind": "unheard-of"}
    )
    chunks = chunk_document(doc, chunk_chars=300, overlap_chars=0)
    vectors = np.ones((len(chunks), DIM), np.float32)
    sparse = [SparseEncoder().encode_document(c.text) for c in chunks]
    store.upsert_chunks("filters", chunks, vectors, sparse, "h1", None, doc.metadata)
    assert {c.document_id for c in store.search_dense(["filters"], query, 10, where)} == {"late"}
    assert store.matching_documents("filters", where) == {"late"}
    gone = next(iter(metadata))
    kept_before = store.matching_documents("filters", parse_filter({"$not": {"kind": "x"}}))
    assert gone in kept_before
    store.delete_document("filters", gone)
    assert gone not in store.matching_documents("filters", parse_filter({"$not": {"kind": "x"}}))
    store.delete_document("filters", "late")
    assert store.search_dense(["filters"], query, 10, where) == []
