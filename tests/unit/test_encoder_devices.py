"""`ragbus bench-encoder`'s comparisons: the cosines and the nearest-chunk overlap that say
whether a faster configuration still embeds as the first one does."""

from __future__ import annotations

import numpy as np
import pytest

from bench import encoder_devices as module
from bench.encoder_devices import Encoded, agreement
from infra.retrieval import encoder as encoder_module
from infra.settings import Settings


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_the_same_vectors_agree_wholly_and_others_less() -> None:
    rng = np.random.default_rng(3)
    chunks, queries = unit(rng.normal(size=(50, 8))), unit(rng.normal(size=(6, 8)))
    base = Encoded(chunks, chunks[:10], queries)
    same = agreement(base, Encoded(chunks.copy(), chunks[:10].copy(), queries.copy()))
    assert same["top10_overlap"] == 1.0
    assert same["chunk_cosine"]["min"] == pytest.approx(1.0, abs=1e-5)

    noisy = unit(chunks + rng.normal(scale=0.5, size=chunks.shape))
    other = agreement(base, Encoded(noisy, noisy[:10], queries))
    assert other["chunk_cosine"]["min"] < 0.99
    assert other["top10_overlap"] < 1.0


def test_without_cuda_only_the_cpu_is_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "cuda_available", lambda: False)
    monkeypatch.setattr(encoder_module, "cpu_has_bf16", lambda: False)
    assert [name for name, _ in module.configurations(Settings())] == ["cpu"]
    # a bf16 CPU: ingestion's encoder (torch, bf16) and the query path's (ONNX, fp32) apart
    monkeypatch.setattr(encoder_module, "cpu_has_bf16", lambda: True)
    assert [name for name, _ in module.configurations(Settings())] == ["cpu", "cpu-query"]
    assert [name for name, _ in module.configurations(Settings(encoder_precision="fp32"))] == [
        "cpu"
    ]
    monkeypatch.setattr(module, "cuda_available", lambda: True)
    names = [name for name, _ in module.configurations(Settings())]
    assert names == ["cpu-torch", "cuda", "cuda-bf16"]  # the GPU's default, then the other
    bf16 = Settings(encoder_precision="bf16")
    assert [name for name, _ in module.configurations(bf16)][-1] == "cuda-fp32"
