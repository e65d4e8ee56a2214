"""Sentence vectors pooled from the chunk's own forward pass (`infra.retrieval.span_pooling`,
`infra.retrieval.chunk_vectors`): the pooling itself, the offsets of a titled chunk, and the
fallback for sentences past the model's window; without a model."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from contracts.ingest import DocumentIn
from infra.metrics import ENCODER_PASS_TEXTS
from infra.retrieval.chunk_vectors import chunk_embeddings, shown_sentences
from infra.retrieval.chunking import chunk_document
from infra.retrieval.encoder import Encoder
from infra.retrieval.span_pooling import SpanItem, SpanVectors, TokenStates, pool_spans
from tests.unit.fakes import FakeEncoder

DIM = 4


def states(offsets: list[tuple[int, int]], tokens: list[list[float]]) -> TokenStates:
    return TokenStates(
        dense=np.ones(DIM, dtype=np.float32) / 2,
        tokens=np.asarray(tokens, dtype=np.float32),
        offsets=np.asarray(offsets),
    )


def test_a_span_is_the_normalised_mean_of_its_tokens() -> None:
    # "ab cd. ef" as [CLS] ab cd . ef [SEP]: the specials have empty offsets
    found = states(
        [(0, 0), (0, 2), (3, 5), (5, 6), (7, 9), (0, 0)],
        [[9, 9, 9, 9], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [9, 9, 9, 9]],
    )
    pooled = pool_spans(found, [(0, 6), (7, 9)])
    assert pooled.pooled.tolist() == [True, True]
    assert np.allclose(pooled.spans[0], np.array([1, 1, 1, 0]) / np.sqrt(3))
    assert np.allclose(pooled.spans[1], [0, 0, 0, 1])
    assert np.allclose(pooled.dense, found.dense)


def test_a_span_past_the_window_or_without_tokens_is_not_pooled() -> None:
    # the text was cut after character 5: a span reaching past it, or before any token, is left
    found = states([(0, 0), (0, 2), (3, 5), (0, 0)], [[0, 0, 0, 1]] * 4)
    pooled = pool_spans(found, [(0, 5), (3, 9), (20, 30)])
    assert pooled.pooled.tolist() == [True, False, False]
    assert not pooled.spans[1:].any()
    assert pool_spans(found, []).spans.shape == (0, DIM)


class CharEncoder(Encoder):
    """One token per character, its state a hash of the character: pooled spans are known."""

    runtime = "test"
    dim = DIM
    pools_spans = True
    batch_size = 2

    def __init__(self, window: int = 10_000) -> None:
        self.window = window
        self.passes: list[list[str]] = []
        self.alone: list[str] = []

    @staticmethod
    def state(char: str) -> np.ndarray:
        return np.array([1.0 + (ord(char) % 7), ord(char) % 3, 1.0, ord(char) % 5], np.float32)

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        self.alone.extend(texts)
        return np.stack([self.expected(text) for text in texts])

    def expected(self, text: str) -> np.ndarray:
        chars = [c for c in text if not c.isspace()] or ["x"]
        mean = np.mean([self.state(c) for c in chars], axis=0)
        return (mean / np.linalg.norm(mean)).astype(np.float32)

    def _token_batch(self, texts: list[str]) -> list[TokenStates]:
        self.passes.append(list(texts))
        out = []
        for text in texts:
            kept = [i for i, c in enumerate(text) if not c.isspace()][: self.window]
            out.append(
                TokenStates(
                    dense=self.expected(text),
                    tokens=np.stack([self.state(text[i]) for i in kept]),
                    offsets=np.array([(i, i + 1) for i in kept]),
                )
            )
        return out


def test_encode_spans_keeps_each_text_its_own_rows_whatever_the_batching() -> None:
    encoder = CharEncoder()
    items: list[SpanItem] = [("a much longer text", [(2, 6)]), ("bb", [(0, 2)]), ("cccc", [])]
    before = ENCODER_PASS_TEXTS._sum.get()
    made = encoder.encode_spans(items)
    assert ENCODER_PASS_TEXTS._sum.get() - before == 3
    assert encoder.passes == [["bb", "cccc"], ["a much longer text"]]  # by length, 2 a pass
    for (text, spans), vectors in zip(items, made, strict=True):
        assert np.allclose(vectors.dense, encoder.expected(text))
        for (a, b), row in zip(spans, vectors.spans, strict=True):
            assert np.allclose(row, encoder.expected(text[a:b]))
    assert made[2].spans.shape == (0, DIM)


DOC = DocumentIn(
    id="d",
    title="Panama Canal",
    text="The Gatun Locks raise ships 26 metres [3]. They were designed by engineers of the\n"
    "Isthmian Canal Commission. Work began in 1909.",
)


async def test_a_titled_chunks_sentences_are_pooled_at_their_place_in_the_encoded_text() -> None:
    encoder = CharEncoder()
    [chunk] = chunk_document(DOC)
    assert chunk.embedding_text.startswith("Panama Canal\n")
    dense, [sentences] = await chunk_embeddings(encoder, [chunk])
    assert np.allclose(dense[0], encoder.expected(chunk.embedding_text))
    assert sentences.spans == [span for span, _ in shown_sentences(chunk)]
    for (a, b), row in zip(sentences.spans, sentences.vectors, strict=True):
        assert np.allclose(row, encoder.expected(chunk.text[a:b]))  # not the title's letters
    assert encoder.alone == []  # one pass, nothing encoded on its own


async def test_sentences_past_the_window_are_encoded_on_their_own() -> None:
    encoder = CharEncoder(window=50)  # the title and the first sentence fit, the rest does not
    [chunk] = chunk_document(DOC)
    _, [sentences] = await chunk_embeddings(encoder, [chunk])
    shown = [text for _, text in shown_sentences(chunk)]
    assert sorted(encoder.alone) == sorted(shown[1:])  # as an answer shows them: one line
    first = chunk.text[slice(*sentences.spans[0])]
    assert np.allclose(sentences.vectors[0], encoder.expected(first))
    for text, row in zip(shown[1:], sentences.vectors[1:], strict=True):
        assert np.allclose(row, encoder.expected(text))


async def test_an_encoder_that_cannot_pool_encodes_the_sentences_in_a_second_pass() -> None:
    encoder = FakeEncoder(dim=64)
    chunks = chunk_document(DOC.model_copy(update={"text": DOC.text + "\n\n" + DOC.text}))
    dense, per_chunk = await chunk_embeddings(encoder, chunks)
    assert np.allclose(dense, encoder.encode([c.embedding_text for c in chunks]))
    for chunk, sentences in zip(chunks, per_chunk, strict=True):
        shown = [text for _, text in shown_sentences(chunk)]
        assert np.allclose(sentences.vectors, encoder.encode(shown))


class SpanDouble:
    """A `SpanEncoding` that says it cannot pool: the two-pass path, even with the method."""

    pools_spans = False

    def __init__(self) -> None:
        self.inner = FakeEncoder(dim=8)

    async def aencode(self, texts: list[str]) -> np.ndarray:
        return self.inner.encode(texts)

    async def aencode_spans(self, items: Sequence[SpanItem]) -> list[SpanVectors]:
        raise AssertionError("pools_spans is False: never called")


async def test_pools_spans_false_keeps_the_two_passes() -> None:
    [chunk] = chunk_document(DOC)
    dense, [sentences] = await chunk_embeddings(SpanDouble(), [chunk])
    assert dense.shape == (1, 8) and len(sentences.spans) == 3
