"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from infra.runtime.services import LocalService, free_port, start_redis
from tests.environment import MODELS_DIR

_made: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """One models directory for the whole run, its xdist workers and every stack they start
    (RAGBUS_MODELS_DIR): the encoder's ONNX export costs seconds of CPU, and made once per data
    directory it was made some fifty times a run. The export itself is tested with a
    directory of its own (tests/unit/test_encoder.py)."""
    if MODELS_DIR not in os.environ:
        _made.append(tempfile.mkdtemp(prefix="ragbus-test-models-"))
        os.environ[MODELS_DIR] = _made[-1]
        config.add_cleanup(_remove_made_models_dir)


def _remove_made_models_dir() -> None:
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)
    os.environ.pop(MODELS_DIR, None)


@pytest.fixture(scope="session")
def redis_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    """A throw-away redis-server on a free port (never the machine's own on 6379)."""
    service = start_redis(free_port(), tmp_path_factory.mktemp("redis-unit"), persistent=False)
    yield service
    service.stop()
