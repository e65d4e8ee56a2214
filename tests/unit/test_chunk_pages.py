"""A parsed file's pages, from chunking to the answer's citation (issue 46): no chunk crosses
a page, each knows its page and heading path, the stores keep and return them, and the
answer cites them. A document without pages chunks exactly as it did before pages existed."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient

from contracts.ingest import DocumentIn, PageSpan
from contracts.models import Citation, RetrievedChunk
from infra.retrieval.chunking import Chunk, _pack, chunk_document, chunk_id_for, placed
from infra.retrieval.graph.store import open_graph_store
from infra.retrieval.lexical import SparseEncoder
from infra.retrieval.sentences import split_sentences
from infra.retrieval.vectors import VectorStore, open_vector_store
from infra.retrieval.vectors.points import StoredPoint
from infra.retrieval.vectors.qdrant import QdrantVectorStore
from infra.settings import Settings
from orchestrator.answer import build_answer
from orchestrator.state import RequestState

# ------------------------------------------------------------------ the chunking before pages

_OLD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def _old_sections(text: str) -> Iterator[tuple[str, str]]:
    """`infra.retrieval.chunking._sections` as it was before pages, frozen here."""
    path: list[tuple[int, str]] = []
    body: list[str] = []
    in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        match = None if in_fence else _OLD_HEADING.match(line)
        if match is None:
            body.append(line)
            continue
        yield " > ".join(name for _, name in path), "\n".join(body)
        body = []
        level = len(match.group(1))
        path = [(lvl, name) for lvl, name in path if lvl < level] + [(level, match.group(2))]
    yield " > ".join(name for _, name in path), "\n".join(body)


def _old_chunk_document(
    doc: DocumentIn, chunk_chars: int = 800, overlap_chars: int = 120
) -> list[Chunk]:
    """`chunk_document` as it was before pages (its packing is unchanged, and shared)."""
    overlap_chars = max(0, min(overlap_chars, chunk_chars // 2))
    source = str(doc.metadata.get("source") or doc.metadata.get("url") or "")
    chunks: list[Chunk] = []
    for heading, body in _old_sections(doc.text):
        for text in _pack(split_sentences(body), chunk_chars, overlap_chars):
            index = len(chunks)
            chunks.append(
                Chunk(
                    chunk_id=chunk_id_for(doc.namespace, doc.id, index),
                    document_id=doc.id,
                    namespace=doc.namespace,
                    title=doc.title,
                    source=source,
                    index=index,
                    text=text,
                    heading=heading,
                )
            )
    return chunks


WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
]


def _random_text(rng: random.Random) -> str:
    """Markdown-ish text: headings of every level, fences with `#` lines inside, lists,
    abbreviations, an over-long sentence now and then, blank lines."""
    lines: list[str] = []
    for _ in range(rng.randint(5, 60)):
        roll = rng.random()
        if roll < 0.15:
            lines.append("#" * rng.randint(1, 6) + " " + " ".join(rng.choices(WORDS, k=3)))
        elif roll < 0.2:
            lines += ["```", "# not a heading", "code()", "```"]
        elif roll < 0.3:
            lines.append("- " + " ".join(rng.choices(WORDS, k=rng.randint(2, 8))))
        elif roll < 0.35:
            lines.append(" ".join(rng.choices(WORDS, k=rng.randint(80, 200))))
        elif roll < 0.4:
            lines.append("")
        else:
            sentences = [
                " ".join(rng.choices(WORDS, k=rng.randint(3, 20))).capitalize()
                + rng.choice([".", "!", "?", ". E.g. this.", "."])
                for _ in range(rng.randint(1, 6))
            ]
            lines.append(" ".join(sentences))
    return "\n".join(lines) or "Nothing."


@pytest.mark.parametrize("seed", range(40))
def test_a_document_without_pages_chunks_exactly_as_before(seed: int) -> None:
    rng = random.Random(seed)
    doc = DocumentIn(
        id=f"doc-{seed}",
        title=rng.choice(["", "A Title"]),
        text=_random_text(rng),
        namespace=rng.choice(["default", "other"]),
        metadata=rng.choice([{}, {"source": "s.md"}]),
    )
    size = rng.choice([20, 120, 300, 800])
    overlap = rng.choice([0, 40, 120])
    new = chunk_document(doc, size, overlap)
    assert new == _old_chunk_document(doc, size, overlap)
    assert all(c.page is None and c.page_label == "" for c in new)


def test_the_default_sizes_chunk_as_before() -> None:
    text = "\n\n".join(_random_text(random.Random(n)) for n in range(5))
    doc = DocumentIn(id="d", title="T", text=text)
    assert chunk_document(doc) == _old_chunk_document(doc)


# ------------------------------------------------------------------ a document with pages


def _sentence(page: int, n: int) -> str:
    return f"Page {page} sentence {n} tells fact p{page}s{n} at some length for packing."


PAGES = [
    # (label, heading lines before sentences, sentences, heading lines after)
    ("", ["# Introduction"], 6, []),
    ("", [], 4, ["## Background"]),  # a heading at the end of page 2 heads page 3
    ("", [], 5, []),
    ("slide 4", ["# Methods", "## Setup"], 3, []),
    ("", ["### Detail"], 4, []),
]
EXPECTED_HEADING = {
    1: ["Introduction"] * 6,
    2: ["Introduction"] * 4,
    3: ["Introduction > Background"] * 5,
    4: ["Methods > Setup"] * 3,
    5: ["Methods > Setup > Detail"] * 4,
}


def _paged() -> DocumentIn:
    text = ""
    spans: list[PageSpan] = []
    for number, (label, before, count, after) in enumerate(PAGES, start=1):
        spans.append(PageSpan(number=number, start=len(text), label=label))
        lines = [*before, " ".join(_sentence(number, n) for n in range(count)), *after]
        text += "\n".join(lines) + "\n\n"
    return DocumentIn(id="report.pdf", title="Report", text=text, pages=spans, namespace="ns")


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_chunks_never_cross_a_page_and_know_theirs() -> None:
    doc = _paged()
    chunks = chunk_document(doc, chunk_chars=150, overlap_chars=80)
    slices = {
        span.number: doc.text[span.start : end]
        for span, end in zip(
            doc.pages, [p.start for p in doc.pages[1:]] + [len(doc.text)], strict=True
        )
    }
    assert len(chunks) > len(PAGES)  # several chunks a page: the overlap is exercised
    for chunk in chunks:
        holding = [n for n, text in slices.items() if _flat(chunk.text) in _flat(text)]
        assert chunk.page is not None and holding == [chunk.page], chunk
        span = doc.pages[chunk.page - 1]
        assert chunk.page_label == span.named()
        tags = re.findall(r"fact p(\d+)s(\d+)", chunk.text)
        assert tags and {int(p) for p, _ in tags} == {chunk.page}
        for page, n in tags:  # the heading path runs on across pages
            assert chunk.heading == EXPECTED_HEADING[int(page)][int(n)]
    assert next(c.page_label for c in chunks if c.page == 4) == "slide 4"
    assert next(c.page_label for c in chunks if c.page == 2) == "p. 2"
    # every sentence is in a chunk of its page; ids run over the whole document
    for number, (_, _, count, _) in enumerate(PAGES, start=1):
        on_page = " ".join(c.text for c in chunks if c.page == number)
        assert all(_sentence(number, n) in on_page for n in range(count))
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert [c.chunk_id for c in chunks] == [
        chunk_id_for("ns", "report.pdf", i) for i in range(len(chunks))
    ]


def test_one_page_over_the_whole_text_chunks_as_the_text_does() -> None:
    text = _random_text(random.Random(7))
    plain = DocumentIn(id="d", text=text)
    paged = DocumentIn(id="d", text=text, pages=[PageSpan(number=1, start=0)])
    assert [(c.text, c.heading, c.chunk_id) for c in chunk_document(paged, 200, 50)] == [
        (c.text, c.heading, c.chunk_id) for c in chunk_document(plain, 200, 50)
    ]
    assert {c.page for c in chunk_document(paged, 200, 50)} == {1}


def test_text_before_the_first_page_and_empty_pages() -> None:
    text = "A cover note. Page one text. Page three text."
    doc = DocumentIn(
        id="d",
        text=text,
        pages=[
            PageSpan(number=1, start=text.index("Page one")),
            PageSpan(number=2, start=text.index("Page three")),  # empty: nothing of its own
            PageSpan(number=3, start=text.index("Page three")),
        ],
    )
    assert [(c.text, c.page, c.page_label) for c in chunk_document(doc)] == [
        ("A cover note.", None, ""),
        ("Page one text.", 1, "p. 1"),
        ("Page three text.", 3, "p. 3"),
    ]


def test_a_stored_place_reads_back_with_defaults_for_old_payloads() -> None:
    assert placed({}) == {}
    assert placed({"heading": "", "page": None}) == {}
    assert placed({"page": 3, "page_label": "p. 3", "heading": "A > B"}) == {
        "page": 3,
        "page_label": "p. 3",
        "section": "A > B",
    }
    assert placed({"page": 2.0}) == {"page": 2}  # a backend that reads numbers as floats
    assert placed({"page": 0, "page_label": "x"}) == {}
    assert placed({"page": True}) == {}


# ------------------------------------------------------------------ the stores

DIM = 8
SPARSE = SparseEncoder()


def _vectors(n: int) -> np.ndarray:
    rows = np.random.default_rng(0).normal(size=(n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture(params=["edge", "qdrant-local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    if request.param == "edge":
        opened: VectorStore = open_vector_store(Settings(data_dir=tmp_path), DIM)
    else:
        opened = QdrantVectorStore(QdrantClient(path=str(tmp_path / "local")), DIM)
    yield opened
    opened.close()


def _index(store: VectorStore, doc: DocumentIn) -> tuple[list[Chunk], np.ndarray]:
    chunks = chunk_document(doc, chunk_chars=150, overlap_chars=0)
    dense = _vectors(len(chunks))
    sparse = [SPARSE.encode_document(c.text) for c in chunks]
    store.upsert_chunks(doc.namespace, chunks, dense, sparse, doc.content_hash())
    store.optimize()
    return chunks, dense


def test_a_hit_hydrates_with_its_page_label_and_section(store: VectorStore) -> None:
    doc = _paged()
    chunks, dense = _index(store, doc)
    target = next(c for c in chunks if c.page == 4)
    hits = store.search_dense([doc.namespace], dense[target.index], top_k=3)
    assert hits[0].chunk_id == target.chunk_id
    assert hits[0].page is None and hits[0].section == ""  # references stay references
    [whole, *_] = store.hydrate(hits)
    assert (whole.page, whole.page_label, whole.section) == (4, "slide 4", "Methods > Setup")
    assert whole.text == target.text
    by_id = {c.chunk_id: c for c in store.hydrate(store.search_dense(["ns"], dense[0], 50))}
    for chunk in chunks:
        found = by_id[chunk.chunk_id]
        assert (found.page, found.page_label, found.section) == (
            chunk.page,
            chunk.page_label,
            chunk.heading,
        )


def test_a_text_document_and_an_old_payload_hydrate_without_a_page(store: VectorStore) -> None:
    doc = DocumentIn(id="notes", text="# Top\nOne sentence here. Another one there.", namespace="t")
    [_chunk], dense = _index(store, doc)
    [whole] = store.hydrate(store.search_dense(["t"], dense[0], 1))
    assert (whole.page, whole.page_label, whole.section) == (None, "", "Top")
    old = StoredPoint(  # as stored before pages (and headings) were kept
        id=chunk_id_for("t", "old", 0),
        dense=dense[0].tolist(),
        sparse=SPARSE.encode_document("old text"),
        sentences=None,
        payload={
            "chunk_id": chunk_id_for("t", "old", 0),
            "document_id": "old",
            "title": "Old",
            "source": "",
            "namespace": "t",
            "text": "Old text.",
            "index": 0,
            "content_hash": "h",
            "chunk_count": 1,
        },
    )
    store.write_points("t", [old])
    ref = RetrievedChunk(chunk_id=old.id, document_id="old", namespace="t")
    [whole] = store.hydrate([ref])
    assert whole.text == "Old text." and whole.page is None
    assert whole.page_label == "" and whole.section == ""


async def test_the_embedded_graph_keeps_the_place_across_a_reopen(tmp_path: Path) -> None:
    doc = _paged()
    chunks = chunk_document(doc, chunk_chars=150, overlap_chars=0)
    graph = await open_graph_store(Settings(data_dir=tmp_path))
    await graph.upsert_document("ns", doc.id, doc.title, chunks, [[] for _ in chunks])
    await graph.aclose()
    graph = await open_graph_store(Settings(data_dir=tmp_path))
    try:
        found = await graph.fetch_chunks([c.chunk_id for c in chunks])  # type: ignore[attr-defined]
    finally:
        await graph.aclose()
    for chunk in chunks:
        got = found[chunk.chunk_id]
        assert (got.page, got.page_label, got.section) == (
            chunk.page,
            chunk.page_label,
            chunk.heading,
        )


# ------------------------------------------------------------------ the answer


def _state(fused: list[RetrievedChunk], tenant: str = "default") -> RequestState:
    return RequestState(
        request_id="r1",
        tenant=tenant,
        query="q",
        search_queries=["q"],
        namespaces=[fused[0].namespace],
        top_k=5,
        channel_top_k=10,
        deadline_at=time.time() + 60,
        fused=fused,
        draft="Said [1] and [2].",
        draft_citations={1: "c1", 2: "c2"},
    )


def test_the_answer_cites_the_page_and_section() -> None:
    fused = [
        RetrievedChunk(
            chunk_id="c1",
            document_id="report.pdf",
            title="Report",
            namespace="acme__docs",
            text="Methods were these.",
            page=3,
            page_label="p. 3",
            section="Methods",
        ),
        RetrievedChunk(
            chunk_id="c2",
            document_id="notes",
            namespace="acme__docs",
            text="A note.",
            section="Top",
        ),
    ]
    state = _state(fused, tenant="acme")
    answer = build_answer(state, state.created_at, None)
    assert answer.citations[1].page == 3
    assert answer.citations[1].page_label == "p. 3"
    assert answer.citations[1].section == "Methods"
    assert answer.citations[1].namespace == "docs"  # as the caller names it
    text = answer.citations[2]
    assert (text.page, text.page_label, text.section, text.namespace) == (None, "", "Top", "")
    # a citation without a place costs nothing on the wire
    bare = Citation(chunk_id="c", document_id="d")
    assert set(bare.model_dump(exclude_defaults=True)) == {"chunk_id", "document_id"}
