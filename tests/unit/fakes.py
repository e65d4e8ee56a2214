"""Test doubles that keep unit tests free of torch and of any model files."""

from __future__ import annotations

import asyncio
import hashlib
import json

import numpy as np

from contracts.models import RetrievedChunk
from infra.retrieval.lexical import analyze
from infra.retrieval.sentences import clean_sentence, sentence_spans
from infra.retrieval.vectors.codec import chunk_vectors
from infra.runtime.claims import Claims


class FakeEncoder:
    """A deterministic hashed bag-of-words encoder: texts sharing content words are close.

    Same interface as `infra.retrieval.encoder.Encoder`: L2-normalised float32 rows.
    """

    name = "fake-bow"

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.calls = 0

    def _bucket(self, term: str) -> int:
        return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=4).digest()) % self.dim

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for term in analyze(text):
                out[row, self._bucket(term)] += 1.0
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out

    async def aencode(self, texts: list[str]) -> np.ndarray:
        await asyncio.sleep(0)
        return self.encode(texts)


class BrokenEncoder:
    """An encoder whose every call fails, as a model that cannot run would."""

    dim = 256

    def encode(self, texts: list[str]) -> np.ndarray:
        raise RuntimeError("model weights are missing")

    async def aencode(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts)


def with_stored_vectors(chunk: RetrievedChunk, encoder: FakeEncoder) -> RetrievedChunk:
    """The chunk as fusion hands it on after hydration: with the vectors ingestion stores
    (its own embedding, and one per sentence span of the sentence as an answer shows it)."""
    spans = sentence_spans(chunk.text)
    shown = [clean_sentence(chunk.text[a:b]) for a, b in spans]
    kept = [(span, text) for span, text in zip(spans, shown, strict=True) if text]
    vectors = chunk_vectors(
        encoder.encode([chunk.text])[0],
        [span for span, _ in kept],
        encoder.encode([text for _, text in kept]),
    )
    return chunk.model_copy(update={"vectors": vectors})


class MemoryClaims(Claims):
    """The claim store of `infra.runtime.claims` on a dict: unit tests run without Redis."""

    def __init__(self) -> None:
        super().__init__(redis=None, ttl_s=60)  # type: ignore[arg-type]
        self.hashes: dict[str, dict[str, str]] = {}

    async def _store(self, key: str, passages: dict[str, str]) -> None:
        self.hashes.setdefault(key, {}).update(passages)

    async def _load(self, key: str, chunk_ids: list[str]) -> list[bytes | str | None]:
        stored = self.hashes.get(key, {})
        return [stored.get(chunk_id) for chunk_id in chunk_ids]

    async def _load_listed(self, key: str, field: str, also: list[str]) -> list[bytes | str | None]:
        """What the `RESOLVE_LISTED` script returns: the list, its claimed chunks'
        passages, then `also`."""
        listed = self.hashes.get(key, {}).get(field)
        if listed is None:
            return [None]
        wanted = [c["chunk_id"] for c in json.loads(listed) if c.get("claimed") is True]
        return [listed, *await self._load(key, [*wanted, *also])]
