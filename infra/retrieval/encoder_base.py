"""The encoder's base class: L2-normalised float32 embeddings, sorted by length into passes,
coalesced across concurrent callers. The runtimes derive from it: torch
(`infra.retrieval.encoder`) and ONNX Runtime (`infra.retrieval.onnx_encoder`); the loader in
`infra.retrieval.encoder` picks one."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cached_property

import numpy as np

from infra.metrics import ENCODER_PASS_TEXTS
from infra.retrieval.batching import CoalescingBatcher
from infra.retrieval.span_pooling import SpanItem, SpanVectors, TokenStates, pool_spans

BATCH_SIZE = 8
"""Texts per forward pass, sorted by length so a pass pads little (measured on 800-character
chunks with ONNX Runtime: 8 per pass 21.5/s, 16 19.7/s, 32 17.9/s)."""


class Encoder:
    """L2-normalised float32 embeddings. A runtime implements `_encode_batch`, and
    `_token_batch` where it pools spans; `encode` and `encode_spans` sort by length and batch,
    `aencode` and `aencode_spans` run off the event loop and coalesce concurrent calls."""

    name: str
    dim: int
    runtime = "abstract"
    precision = "fp32"
    batch_size = BATCH_SIZE
    device = "cpu"
    pools_spans = False
    """Whether `encode_spans` works: a mean-pooling model whose tokens carry their offsets."""

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError  # pragma: no cover - every runtime defines it

    def _token_batch(self, texts: list[str]) -> list[TokenStates]:
        raise NotImplementedError(f"{self.runtime} does not pool spans")

    def _batches(self, texts: Sequence[str]) -> Iterator[list[int]]:
        """Indices of `texts` in passes of `batch_size`, by length, so a pass pads little."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            yield order[start : start + self.batch_size]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        ENCODER_PASS_TEXTS.observe(len(texts))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for rows in self._batches(texts):
            out[rows] = self._encode_batch([texts[i] for i in rows])
        return out

    def encode_spans(self, items: Sequence[SpanItem]) -> list[SpanVectors]:
        """Each text's embedding (as `encode` gives it) and its spans' vectors, pooled from the
        same forward pass (`infra.retrieval.span_pooling`)."""
        if not items:
            return []
        ENCODER_PASS_TEXTS.observe(len(items))
        texts = [text for text, _ in items]
        out: dict[int, SpanVectors] = {}
        for rows in self._batches(texts):
            states = self._token_batch([texts[i] for i in rows])
            for i, state in zip(rows, states, strict=True):
                out[i] = pool_spans(state, items[i][1])
        return [out[i] for i in range(len(items))]

    coalesce_max_texts = BATCH_SIZE * 4
    """Texts one shared call takes at most (a subclass with its own batch size sets it)."""

    @cached_property
    def _batcher(self) -> CoalescingBatcher[str, np.ndarray]:
        return CoalescingBatcher(self.encode, max_texts=self.coalesce_max_texts)

    @cached_property
    def _span_batcher(self) -> CoalescingBatcher[SpanItem, list[SpanVectors]]:
        return CoalescingBatcher(self.encode_spans, max_texts=self.coalesce_max_texts)

    async def aencode(self, texts: list[str]) -> np.ndarray:
        """`encode` off the event loop, so a long batch never stalls the consumers; concurrent
        calls (documents of an ingest job, queries under load) share forward passes."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return await self._batcher(texts)

    async def aencode_spans(self, items: list[SpanItem]) -> list[SpanVectors]:
        """`encode_spans` off the event loop; concurrent calls share forward passes."""
        if not items:
            return []
        return await self._span_batcher(items)
