"""The environment the tests' child processes (`ragbus up`, `make demo`, a worker) start
from: the machine's, less every `RAGBUS_*` setting of the test run, except the models
directory the whole suite shares (tests/conftest.py), so that the encoder's ONNX export is made
once per run and not once per data directory."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infra.settings import Settings

MODELS_DIR = "RAGBUS_MODELS_DIR"


def child_environment() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("RAGBUS_") or key == MODELS_DIR
    }


def stack_environment(settings: Settings, **extra: str) -> dict[str, str]:
    """A child's environment for a command that talks to a test's stack (`ragbus ingest`, a
    CLI run) by its services, not its API: the stack's NATS, Redis and data directory."""
    env = child_environment()
    env.update(
        RAGBUS_NATS_URL=settings.nats_url,
        RAGBUS_REDIS_URL=settings.redis_url,
        RAGBUS_DATA_DIR=str(settings.data_dir),
        RAGBUS_START_SERVICES="false",
        **extra,
    )
    return env
