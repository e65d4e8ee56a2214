"""A document's chunks as vectors: each chunk's embedding and its sentences' vectors, the ones
extractive generation and the critic compare (`infra.retrieval.vectors.codec.chunk_sentences`).

Where the encoder pools spans (a mean-pooling model: MiniLM, on either runtime) one forward pass
over a chunk's `embedding_text` gives both: the chunk's vector is the mean of its token states,
each sentence's the mean over the sentence's own tokens (`infra.retrieval.span_pooling`). Only a
sentence that ran past the model's window (a chunk longer than 256 word pieces) is encoded on
its own, as every sentence was before, so none is lost. Another encoder (BGE-M3, a test double)
makes the chunk vectors, then the distinct sentences' in a second pass (`sentence_embeddings`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from infra.retrieval.chunking import Chunk
from infra.retrieval.encoder import Encoding, SpanEncoding
from infra.retrieval.sentences import clean_sentence, sentence_spans
from infra.retrieval.span_pooling import SpanItem
from infra.retrieval.vectors.points import Sentences

Shown = list[tuple[tuple[int, int], str]]
"""A chunk's sentences: each span in `chunk.text` and the sentence as an answer shows it."""


def shown_sentences(chunk: Chunk) -> Shown:
    """The chunk's sentence spans with their `clean_sentence` text; empty ones left out."""
    spans = sentence_spans(chunk.text)
    shown = [(span, clean_sentence(chunk.text[span[0] : span[1]])) for span in spans]
    return [(span, text) for span, text in shown if text]


def _sentences(found: Shown, vectors: np.ndarray | None) -> Sentences:
    if not found or vectors is None:
        return Sentences(spans=[], vectors=np.zeros((0, 0), dtype=np.float32))
    return Sentences(spans=[span for span, _ in found], vectors=vectors)


async def _encode_distinct(encoder: Encoding, texts: Sequence[str]) -> dict[str, np.ndarray]:
    """One vector per distinct text, in one call (overlapping chunks share sentences)."""
    distinct = list(dict.fromkeys(texts))
    if not distinct:
        return {}
    rows = np.asarray(await encoder.aencode(distinct), dtype=np.float32)
    return dict(zip(distinct, rows, strict=True))


async def sentence_embeddings(encoder: Encoding, chunks: Sequence[Chunk]) -> list[Sentences]:
    """Each chunk's sentences encoded on their own: one vector per sentence span, of the
    sentence as an answer shows it, each distinct sentence encoded once."""
    per_chunk = [shown_sentences(chunk) for chunk in chunks]
    made = await _encode_distinct(encoder, [text for found in per_chunk for _, text in found])
    return [
        _sentences(found, np.stack([made[text] for _, text in found]) if found else None)
        for found in per_chunk
    ]


async def chunk_embeddings(
    encoder: Encoding, chunks: Sequence[Chunk]
) -> tuple[np.ndarray, list[Sentences]]:
    """Each chunk's vector (of its `embedding_text`) and its sentences' vectors: pooled from the
    chunk's own pass where the encoder can, else from a second pass over the sentences."""
    texts = [chunk.embedding_text for chunk in chunks]
    if not chunks or not (isinstance(encoder, SpanEncoding) and encoder.pools_spans):
        return await encoder.aencode(texts), await sentence_embeddings(encoder, chunks)
    per_chunk = [shown_sentences(chunk) for chunk in chunks]
    items: list[SpanItem] = [
        (text, [(a + chunk.text_offset, b + chunk.text_offset) for (a, b), _ in found])
        for text, chunk, found in zip(texts, chunks, per_chunk, strict=True)
    ]
    pooled = await encoder.aencode_spans(items)
    unpooled = [
        text
        for made, found in zip(pooled, per_chunk, strict=True)
        for ok, (_, text) in zip(made.pooled, found, strict=True)
        if not ok
    ]
    alone = await _encode_distinct(encoder, unpooled)
    sentences = []
    for made, found in zip(pooled, per_chunk, strict=True):
        rows = made.spans.copy()
        for row, (ok, (_, text)) in enumerate(zip(made.pooled, found, strict=True)):
            if not ok:
                rows[row] = alone[text]
        sentences.append(_sentences(found, rows))
    dense = np.stack([made.dense for made in pooled]).astype(np.float32, copy=False)
    return dense, sentences
