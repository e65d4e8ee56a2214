"""The trained intent model at query time: loaded once per process, lazily, thread-safely.

Probabilities are mapped to intents through the head's own `classes_`: scikit-learn orders
`predict_proba`'s columns alphabetically, not in `meta.labels` or taxonomy order, and reading
them positionally would silently swap intents.

Both kinds of model answer through one head interface, `predict_proba(texts, vectors)` and
`classes_`: the shared body's `CueHead` reads the query's words and its embedding; a fine-tuned
body's SetFit model (`_SetFitHead`) encodes the text itself.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contracts.enums import Intent
from engines.classify.model_meta import HEAD_FILE, META_FILE, BodyMode, ModelMeta
from infra.logging import get_logger

log = get_logger(__name__)


class IntentModel:
    """A fitted head: `predict_proba(texts, vectors)` with one column per `classes_`."""

    def __init__(self, meta: ModelMeta, head: Any) -> None:
        self.meta = meta
        self._head = head
        self.columns = [Intent(str(label)) for label in head.classes_]
        if sorted(c.value for c in self.columns) != sorted(meta.labels):
            raise ValueError(f"head classes {self.columns} do not match meta labels {meta.labels}")

    @property
    def shares_body(self) -> bool:
        """True when the dense search's query embedding is this model's input."""
        return self.meta.body_mode is BodyMode.SHARED

    def probabilities(self, text: str, vector: np.ndarray) -> dict[Intent, float]:
        """Intent → probability for one query; `vector` is its shared-body embedding."""
        row = self._head.predict_proba([text], vector.reshape(1, -1))[0]
        return {intent: float(p) for intent, p in zip(self.columns, row, strict=True)}


class _SetFitHead:
    """A fine-tuned SetFit model behind the head interface: it encodes the text with its own
    body, so the shared embedding is not used."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self.classes_ = model.model_head.classes_
        self._lock = threading.Lock()  # torch modules must not run one forward pass twice at once

    def predict_proba(self, texts: Sequence[str], vectors: np.ndarray) -> np.ndarray:
        with self._lock:
            rows: np.ndarray = self._model.predict_proba(list(texts), as_numpy=True)
        return rows


def load_intent_model(directory: Path) -> IntentModel:
    """Read a model written by `training.train_intent_model`; raises if it is incomplete."""
    meta = ModelMeta.read(directory)
    if meta.body_mode is BodyMode.SHARED:
        import joblib

        # The body is the encoder this process already has: load the head alone.
        return IntentModel(meta, joblib.load(directory / HEAD_FILE))
    from setfit import SetFitModel

    model = SetFitModel.from_pretrained(str(directory), device="cpu", local_files_only=True)
    return IntentModel(meta, _SetFitHead(model))


class ModelSlot:
    """The process's intent model: loaded on first use, at most once; `None` when there is
    none (logged once, and classification uses zero-shot)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._loaded = False
        self._model: IntentModel | None = None

    @property
    def loaded(self) -> bool:
        return self._loaded

    def get(self) -> IntentModel | None:
        if self._loaded:
            return self._model
        with self._lock:
            if not self._loaded:
                self._model = self._load()
                self._loaded = True
        return self._model

    def _load(self) -> IntentModel | None:
        if self.directory is None:
            return None
        if not (self.directory / META_FILE).is_file():
            log.warning(
                "intent_model_missing",
                path=str(self.directory),
                fallback="zero_shot",
                hint="run `ragbus train-intent`",
            )
            return None
        try:
            model = load_intent_model(self.directory)
        except Exception as exc:
            log.error(
                "intent_model_unusable",
                path=str(self.directory),
                error=f"{type(exc).__name__}: {exc}",
                fallback="zero_shot",
                hint="train it again: `ragbus train-intent` (or `make intent-model`)",
            )
            return None
        log.info(
            "intent_model_loaded",
            path=str(self.directory),
            version=model.meta.version,
            body_mode=model.meta.body_mode.value,
        )
        return model
