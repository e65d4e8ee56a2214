"""The environment the tests' child processes (`ragbus up`, `make demo`, a worker) start
from: the machine's, less every `RAGBUS_*` setting of the test run, except the models
directory the whole suite shares (tests/conftest.py), so that the encoder's ONNX export is made
once per run and not once per data directory."""

from __future__ import annotations

import os

MODELS_DIR = "RAGBUS_MODELS_DIR"


def child_environment() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("RAGBUS_") or key == MODELS_DIR
    }
