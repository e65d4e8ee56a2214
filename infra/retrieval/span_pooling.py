"""Vectors of character spans of a text, pooled from the token states of the text's own forward
pass: a chunk's sentences come with the chunk's vector instead of a second encoder pass.

A mean-pooling encoder (MiniLM) embeds a text as the mean of its last hidden states; a span's
vector is the same mean over the tokens inside the span, L2-normalised. Each token carries its
character offsets in the text (the tokenizer's offset mapping), so a span takes the tokens whose
characters lie inside it; special and padding tokens (empty offsets) belong to none. A span that
runs past the model's window (256 word pieces for MiniLM: the tail of a long text is cut) is not
pooled: `pooled` says so, and the caller encodes it on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Span = tuple[int, int]
SpanItem = tuple[str, Sequence[Span]]
"""A text and character spans in it."""


@dataclass(frozen=True)
class TokenStates:
    """One text's forward pass: its embedding as `Encoder.encode` gives it, and its tokens'
    last hidden states with their character offsets (padding already dropped)."""

    dense: np.ndarray
    tokens: np.ndarray
    offsets: np.ndarray


@dataclass(frozen=True)
class SpanVectors:
    """A text's embedding and one row per span: the span's pooled vector where `pooled`, zeros
    where the span did not fit the model's window."""

    dense: np.ndarray
    spans: np.ndarray
    pooled: np.ndarray


def pool_spans(states: TokenStates, spans: Sequence[Span]) -> SpanVectors:
    """Each span's mean token state, L2-normalised; spans not wholly inside the window (or with
    no token at all) are left as zeros, `pooled` False."""
    dim = int(states.dense.shape[-1])
    out = np.zeros((len(spans), dim), dtype=np.float32)
    pooled = np.zeros(len(spans), dtype=bool)
    offsets = np.asarray(states.offsets).reshape(-1, 2)
    starts, ends = offsets[:, 0], offsets[:, 1]
    real = ends > starts
    window_end = int(ends[real].max()) if real.any() else 0
    for row, (start, end) in enumerate(spans):
        inside = real & (starts >= start) & (ends <= end)
        if end > window_end or not inside.any():
            continue
        mean = np.asarray(states.tokens, dtype=np.float32)[inside].mean(axis=0)
        norm = float(np.linalg.norm(mean))
        if norm > 0:
            out[row] = mean / norm
            pooled[row] = True
    return SpanVectors(dense=np.asarray(states.dense, dtype=np.float32), spans=out, pooled=pooled)
