"""Vectors packed for the wire and back: base64 of little-endian float32 (query vectors, which
search compares exactly) or float16 (stored chunk and sentence vectors: cosine to the
float32 ones above 0.9999, half the bytes)."""

from __future__ import annotations

import base64
from collections.abc import Sequence

import numpy as np

from contracts.models import ChunkVectors, RetrievedChunk
from infra.retrieval.sentences import clean_sentence, split_sentences

F32 = np.dtype("<f4")
F16 = np.dtype("<f2")


def pack(vector: np.ndarray | Sequence[float], dtype: np.dtype = F32) -> str:
    """Any array (its rows in order) as base64 of `dtype`."""
    return base64.b64encode(np.ascontiguousarray(vector, dtype=dtype).tobytes()).decode("ascii")


def unpack(text: str, dtype: np.dtype = F32, dim: int | None = None) -> np.ndarray:
    """float32 array of the packed values; shaped (rows, dim) when `dim` is given."""
    values = np.frombuffer(base64.b64decode(text), dtype=dtype).astype(np.float32)
    return values.reshape(-1, dim) if dim else values


def pack_query(vector: np.ndarray | Sequence[float]) -> str:
    return pack(np.asarray(vector, dtype=np.float32).reshape(-1))


def unpack_query(text: str | None, dim: int | None = None) -> np.ndarray | None:
    """The query vector, or None when there is none or it has another dimension."""
    if not text:
        return None
    vector = unpack(text)
    return vector if dim is None or len(vector) == dim else None


def chunk_vectors(
    dense: np.ndarray, spans: Sequence[tuple[int, int]], sentences: np.ndarray
) -> ChunkVectors:
    dim = int(dense.shape[-1])
    return ChunkVectors(
        dim=dim,
        dense=pack(dense, F16),
        spans=[(int(a), int(b)) for a, b in spans],
        sentences=pack(sentences.reshape(-1, dim), F16) if len(spans) else "",
    )


def dense_of(vectors: ChunkVectors) -> np.ndarray:
    return unpack(vectors.dense, F16)


def sentences_of(vectors: ChunkVectors) -> np.ndarray:
    """One row per span; an empty (0, dim) array when the chunk has none."""
    if not vectors.spans or not vectors.sentences:
        return np.zeros((0, vectors.dim), dtype=np.float32)
    rows = unpack(vectors.sentences, F16, vectors.dim)
    if len(rows) != len(vectors.spans):
        raise ValueError(f"{len(rows)} sentence vectors for {len(vectors.spans)} spans")
    return rows


def chunk_sentences(chunk: RetrievedChunk) -> list[tuple[str, np.ndarray | None]]:
    """A chunk's sentences as an answer shows them, each with its stored vector when ingestion
    kept them (spans into the text, one vector per span), else split here without one."""
    if chunk.vectors is not None and chunk.vectors.spans:
        rows = sentences_of(chunk.vectors)
        return [
            (clean_sentence(chunk.text[start:end]), rows[i])
            for i, (start, end) in enumerate(chunk.vectors.spans)
        ]
    return [(clean_sentence(raw), None) for raw in split_sentences(chunk.text)]
