"""Sentences, chunks and the BM25 analyzer."""

from __future__ import annotations

import itertools
import uuid

import pytest

from contracts.ingest import DocumentIn
from infra.retrieval.chunking import chunk_document, chunk_id_for
from infra.retrieval.lexical import SparseEncoder, analyze, term_id
from infra.retrieval.sentences import split_sentences


def test_sentences_keep_abbreviations_initials_and_decimals() -> None:
    text = (
        "Dr. Smith measured 3.14 units, e.g. in mice. J. R. Tolkien wrote it. "
        "Was it true? Yes!\n\nA new paragraph"
    )
    assert split_sentences(text) == [
        "Dr. Smith measured 3.14 units, e.g. in mice.",
        "J. R. Tolkien wrote it.",
        "Was it true?",
        "Yes!",
        "A new paragraph",
    ]


def test_list_items_are_sentences() -> None:
    assert split_sentences("Steps:\n- mix the flour\n- bake it") == [
        "Steps:",
        "- mix the flour",
        "- bake it",
    ]


def _doc(text: str, **kw: object) -> DocumentIn:
    return DocumentIn(id="doc-1", title="Title", text=text, **kw)  # type: ignore[arg-type]


def test_chunks_respect_size_overlap_and_sentences() -> None:
    sentences = [f"Sentence {i} talks about topic {i % 7} at some length." for i in range(60)]
    chunks = chunk_document(_doc(" ".join(sentences)), chunk_chars=300, overlap_chars=80)
    assert len(chunks) > 5
    assert all(len(c.text) <= 300 for c in chunks)
    for chunk in chunks:  # every chunk is made of whole sentences
        assert chunk.text.startswith("Sentence ") and chunk.text.endswith(".")
    for previous, current in itertools.pairwise(chunks):
        first = current.text.split(". ")[0] + "."
        assert first in previous.text, "a chunk starts with the tail of the previous one"
    covered = " ".join(c.text for c in chunks)
    assert all(s in covered for s in sentences)


def test_chunks_follow_markdown_headings() -> None:
    text = "Intro line.\n\n# Setup\nInstall it.\n\n## Linux\nUse apt.\n\n# Usage\nRun it."
    chunks = chunk_document(_doc(text), chunk_chars=500, overlap_chars=50)
    assert [(c.heading, c.text) for c in chunks] == [
        ("", "Intro line."),
        ("Setup", "Install it."),
        ("Setup > Linux", "Use apt."),
        ("Usage", "Run it."),
    ]
    assert [c.index for c in chunks] == [0, 1, 2, 3]
    assert chunks[2].embedding_text.startswith("Title — Setup > Linux\n")


def test_overlong_sentence_is_cut_within_bounds() -> None:
    chunks = chunk_document(_doc("word " * 500), chunk_chars=200, overlap_chars=0)
    assert all(0 < len(c.text) <= 200 for c in chunks)
    assert sum(c.text.count("word") for c in chunks) == 500


def test_chunk_ids_are_stable_uuids() -> None:
    doc = _doc("One. Two. Three.", namespace="ns1")
    first, again = chunk_document(doc), chunk_document(doc)
    assert [c.chunk_id for c in first] == [c.chunk_id for c in again]
    assert first[0].chunk_id == str(uuid.uuid5(uuid.NAMESPACE_URL, "ns1/doc-1#0"))
    assert chunk_id_for("ns1", "doc-1", 0) != chunk_id_for("ns2", "doc-1", 0)
    assert first[0].namespace == "ns1" and first[0].document_id == "doc-1"


def test_source_comes_from_metadata() -> None:
    doc = _doc("Text here.", metadata={"url": "https://example.org/a"})
    assert chunk_document(doc)[0].source == "https://example.org/a"


def test_analyzer_stems_and_drops_stop_words() -> None:
    assert analyze("The runners were running in COVID-19 trials with H2O") == [
        "runner",
        "run",
        "covid",
        "19",
        "trial",
        "h2o",
    ]


def test_term_ids_are_stable_31_bit() -> None:
    assert term_id("cancer") == term_id("cancer")
    assert 0 <= term_id("cancer") < 2**31
    assert term_id("cancer") != term_id("statin")


def test_bm25_document_weights_saturate_and_normalise_length() -> None:
    encoder = SparseEncoder(avgdl=10)
    indices, values = encoder.encode_document("statin statin statin cancer")
    weights = dict(zip(indices, values, strict=True))
    statin, cancer = weights[term_id("statin")], weights[term_id("cancer")]
    assert statin > cancer
    assert statin < 3 * cancer, "term frequency saturates"
    assert statin < encoder.k1 + 1
    short = dict(zip(*encoder.encode_document("cancer"), strict=True))[term_id("cancer")]
    long_doc = "cancer " + " ".join(f"filler{i}" for i in range(40))
    long = dict(zip(*encoder.encode_document(long_doc), strict=True))[term_id("cancer")]
    assert short > long, "a term weighs less in a longer document"
    assert indices == sorted(indices)


def test_bm25_query_weights_are_one_per_unique_term() -> None:
    indices, values = SparseEncoder().encode_query("cancer cancer of the statins?")
    assert sorted(indices) == sorted({term_id("cancer"), term_id("statin")})
    assert values == [1.0, 1.0]
    assert SparseEncoder().encode_query("the of and") == ([], [])


@pytest.mark.parametrize("bad", [0, 10])
def test_chunk_chars_lower_bound(bad: int) -> None:
    with pytest.raises(ValueError, match="chunk_chars"):
        chunk_document(_doc("x."), chunk_chars=bad)


def test_stemming_from_several_threads_gives_every_word_its_own_stem() -> None:
    """Ingestion stems in threads side by side (entities, sparse terms); a stemmer shared
    between them handed out other words' stems and raised IndexError."""
    import threading

    import snowballstemmer

    from infra.retrieval.lexical import stem

    reference = snowballstemmer.stemmer("english")
    words = [
        f"{root}{suffix}"
        for root in ("adequate", "allergen", "antacid", "nation", "relat")
        for suffix in ("", "s", "ly", "ing", "ions", "ional", "ed", "ness", "ment", "ive")
    ]
    words = [w + "x" * n for n in range(40) for w in words]  # many distinct, uncached words
    expected = {w: reference.stemWord(w) for w in words}
    stem.cache_clear()
    wrong: list[str] = []

    def work(part: list[str]) -> None:
        try:
            wrong.extend(w for w in part if stem(w) != expected[w])
        except Exception as exc:  # what a shared stemmer raised
            wrong.append(repr(exc))

    threads = [threading.Thread(target=work, args=(words[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
