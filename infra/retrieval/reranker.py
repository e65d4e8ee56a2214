"""Optional cross-encoder reranking (FlagEmbedding `FlagReranker`) from a local directory.

Off unless `RAGBUS_RERANKER_PATH` is set; FlagEmbedding is imported by the loader only, so the
fuse worker without a reranker stays as light as before.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
from typing import Any

from infra.logging import get_logger
from infra.settings import Settings
from infra.threads import cap_torch_threads

log = get_logger(__name__)

BATCH_SIZE = 32
MAX_LENGTH = 512


def _sigmoid(logit: float) -> float:
    if logit >= 0:
        return 1.0 / (1.0 + math.exp(-logit))
    z = math.exp(logit)
    return z / (1.0 + z)


class Reranker:
    """Relevance of passages to a query, in (0, 1): the sigmoid of the cross-encoder's logit.

    One lock serialises calls into the model (torch modules are not meant to run concurrent
    forward passes); `ascore` runs `score` in a thread, off the event loop.
    """

    def __init__(self, model: Any, name: str) -> None:
        self._model = model
        self._lock = threading.Lock()
        self.name = name

    def score(self, query: str, passages: list[str]) -> list[float]:
        if not passages:
            return []
        pairs = [(query, passage) for passage in passages]
        with self._lock:
            logits = self._model.compute_score(
                pairs, batch_size=BATCH_SIZE, max_length=MAX_LENGTH, normalize=False
            )
        if isinstance(logits, int | float):  # one pair may come back as a bare number
            logits = [logits]
        return [_sigmoid(float(logit)) for logit in logits]

    async def ascore(self, query: str, passages: list[str]) -> list[float]:
        return await asyncio.to_thread(self.score, query, passages)


def load_reranker(settings: Settings) -> Reranker | None:
    """The configured reranker on CPU in fp32, offline, torch's threads capped at this
    process's share of the cores; None when none is configured."""
    path = settings.reranker_path
    if path is None:
        return None
    if not path.is_dir():
        raise FileNotFoundError(f"reranker model directory not found: {path}")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    cap_torch_threads(settings)
    from FlagEmbedding import FlagReranker

    model = FlagReranker(str(path), use_fp16=False, devices="cpu")
    reranker = Reranker(model, name=path.name)
    log.info("reranker_loaded", path=str(path))
    return reranker
