"""Instant engines: the real API, orchestrator, worker runtime, nats-server and Redis, with every
model and store replaced by one that answers at once. What such a stack spends per request is
the pure cost of the broker path (`ragbus bench-bus`).

The answers keep realistic shapes and sizes: 384-d query vectors, 20 chunks of about 800
characters per channel, an extractive answer over eight of them.

Run as `python -m bench.instant` (settings from the `RAGBUS_*` environment) to serve such a
stack until SIGTERM.
"""

from __future__ import annotations

import asyncio
import sys
import zlib
from collections.abc import Callable, Sequence
from importlib.resources import files
from typing import Any, TypeVar

import numpy as np

from contracts.ingest import DocumentIn
from contracts.models import RetrievedChunk
from infra.logging import configure_logging
from infra.retrieval.chunking import chunk_document
from infra.retrieval.sentences import clean_sentence, sentence_spans
from infra.retrieval.sparse import Bm25Sparse
from infra.retrieval.vectors.codec import chunk_vectors
from infra.runtime.bus import Bus
from infra.runtime.resources import Resources
from infra.settings import Settings

T = TypeVar("T")
DIM = 384
QUERY_WORKERS = ("classify", "search", "fuse", "generate", "critic")
"""The worker kinds a question passes through (no tool, no ingest)."""


def _seed(text: str) -> int:
    return zlib.crc32(text.encode())


class InstantEncoder:
    """Deterministic unit vectors per text, at a hash's cost."""

    name = "instant"
    dim = DIM

    def encode(self, texts: list[str]) -> np.ndarray:
        rows = [np.random.default_rng(_seed(text)).standard_normal(DIM) for text in texts]
        matrix = np.asarray(rows, dtype=np.float32).reshape(len(texts), DIM)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.maximum(norms, 1e-9)

    async def aencode(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts)


def sample_chunks(encoder: InstantEncoder) -> list[RetrievedChunk]:
    """The bundled sample corpus, chunked as ingestion would, with the vectors it stores."""
    chunks: list[RetrievedChunk] = []
    for path in sorted(files("bench").joinpath("sample").iterdir(), key=lambda p: p.name):
        if not path.name.endswith(".md"):
            continue
        doc = DocumentIn(id=path.name, title=path.name, text=path.read_text(encoding="utf-8"))
        for chunk in chunk_document(doc, 800, 120):
            spans = sentence_spans(chunk.text)
            shown = [clean_sentence(chunk.text[a:b]) for a, b in spans]
            chunks.append(
                RetrievedChunk(
                    chunk_id=chunk.chunk_id,
                    document_id=chunk.document_id,
                    title=chunk.title,
                    source=chunk.source,
                    text=chunk.text,
                    vectors=chunk_vectors(
                        encoder.encode([chunk.embedding_text])[0], spans, encoder.encode(shown)
                    ),
                )
            )
    return chunks


class InstantStore:
    """Answers every search with references to `top_k` chunks of the sample corpus, picked by
    a hash, and hydrates them from memory."""

    inline_reads = True

    def __init__(self, chunks: Sequence[RetrievedChunk]) -> None:
        self._chunks = list(chunks)
        self._by_id = {c.chunk_id: c for c in chunks}

    def _pick(self, key: str, top_k: int) -> list[RetrievedChunk]:
        start = _seed(key) % len(self._chunks)
        picked = (self._chunks[start:] + self._chunks[:start])[:top_k]
        return [
            c.model_copy(update={"score": 1.0 / (i + 1), "text": "", "vectors": None})
            for i, c in enumerate(picked)
        ]

    async def read(self, call: Callable[..., T], *args: Any) -> T:
        return call(*args)

    def hydrate(self, chunks: Sequence[RetrievedChunk]) -> list[RetrievedChunk]:
        out = []
        for chunk in chunks:
            stored = self._by_id[chunk.chunk_id]
            out.append(chunk.model_copy(update={"text": stored.text, "vectors": stored.vectors}))
        return out

    async def chunk_entities(self, chunk_ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        return {}

    def search_dense(
        self, namespaces: Sequence[str], vector: Sequence[float], top_k: int
    ) -> list[RetrievedChunk]:
        return self._pick(f"dense{vector[0]:.6f}", top_k)

    def search_sparse(
        self, namespaces: Sequence[str], indices: Sequence[int], values: Sequence[float], top_k: int
    ) -> list[RetrievedChunk]:
        return self._pick(f"sparse{list(indices)[:3]}", top_k)

    async def local_search(
        self, namespaces: Sequence[str], norms: Sequence[str], top_k: int
    ) -> list[RetrievedChunk]:
        return self._pick(f"local{list(norms)}", top_k)

    async def global_search(
        self,
        namespaces: Sequence[str],
        norms: Sequence[str],
        vector: Sequence[float] | None,
        top_k: int,
    ) -> list[RetrievedChunk]:
        return self._pick(f"global{list(norms)}", top_k)

    async def documents_about(
        self, namespaces: Sequence[str], norms: Sequence[str]
    ) -> list[RetrievedChunk]:
        return []

    async def particular_titles(self, namespaces: Sequence[str], norms: Sequence[str]) -> list[str]:
        return []


class InstantResources(Resources):
    """`Resources` whose models and stores answer at once; Redis and the bus stay real."""

    def __init__(self, settings: Settings, bus: Bus) -> None:
        super().__init__(settings, bus)
        self._instant_encoder = InstantEncoder()
        self._instant_store = InstantStore(sample_chunks(self._instant_encoder))
        self._instant_sparse = Bm25Sparse()

    async def encoder(self) -> Any:
        return self._instant_encoder

    async def sparse(self) -> Any:
        return self._instant_sparse

    async def vectors(self) -> Any:
        return self._instant_store

    async def graph(self) -> Any:
        return self._instant_store


CHILD_ENTRY = ("-m", "bench.instant", "worker")
"""How the instant stack's worker child starts: this module, with the kinds it runs."""


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m bench.instant`: the stack laid out as `ragbus up` lays it out (the API, the
    saga and `launcher.layout.UP_PARENT` here, the other query workers in a child, or all in
    one process when `RAGBUS_UP_PROCESSES=1`). `python -m bench.instant worker KIND...`: that
    child."""
    from launcher.layout import up_layout
    from launcher.serving import serve

    args = list(sys.argv[1:] if argv is None else argv)
    settings = Settings()
    configure_logging(settings.log_level, settings.log_json)
    if args[:1] == ["worker"]:
        running = serve(
            settings,
            api=False,
            orchestrator=False,
            workers=args[1:],
            resources_factory=InstantResources,
        )
    else:
        parent, child = up_layout(settings, QUERY_WORKERS)
        running = serve(
            settings,
            api=True,
            orchestrator=True,
            workers=parent,
            child_workers=child,
            child_entry=CHILD_ENTRY,
            resources_factory=InstantResources,
        )
    asyncio.run(running)


if __name__ == "__main__":
    main()
