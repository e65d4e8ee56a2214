"""What a trained intent model says about itself (`meta.json`), and where it lives.

`meta.json` is written last, after the weights, so its presence means a complete model;
the Makefile uses it as the target that says "the intent model is trained".
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

from infra.settings import Settings

MODEL_DIR_NAME: Final = "intent-model"
META_FILE: Final = "meta.json"
FORMAT: Final = 2
"""Bumped when the files a model consists of change meaning (2: a shared-body model is the
cue head, `HEAD_FILE`, instead of SetFit's head over the embedding alone)."""
HEAD_FILE: Final = "cue_head.joblib"
"""A shared-body model's head (`cue_head.CueHead`); a fine-tuned one is SetFit's own files."""


class BodyMode(StrEnum):
    SHARED = "shared"
    """The body is the unchanged MiniLM the dense search uses: its query embedding (and the
    query's words) feed the head directly, so a request encodes its query once."""
    FINE_TUNED = "fine_tuned"
    """SetFit's contrastive phase tuned the body: more accurate, but classification has to
    encode the query a second time, with its own copy of the body."""


@dataclass(frozen=True)
class ModelMeta:
    version: str
    labels: list[str]
    trained_at: str
    train_size: int
    data_hash: str
    seed: int
    body: str
    body_dim: int
    body_mode: BodyMode
    iterations: int
    train_seconds: float
    setfit_version: str
    format: int = FORMAT

    def write(self, directory: Path) -> None:
        text = json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"
        (directory / META_FILE).write_text(text, encoding="utf-8")

    @classmethod
    def read(cls, directory: Path) -> ModelMeta:
        raw = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
        if raw.get("format") != FORMAT:
            raise ValueError(f"intent model format {raw.get('format')!r}, this code reads {FORMAT}")
        raw["body_mode"] = BodyMode(raw["body_mode"])
        return cls(**raw)


def model_dir(settings: Settings) -> Path:
    return settings.data_dir / MODEL_DIR_NAME
