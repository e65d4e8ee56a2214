"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from infra.runtime.services import LocalService, free_port, start_redis


@pytest.fixture(scope="session")
def redis_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    """A throw-away redis-server on a free port (never the machine's own on 6379)."""
    service = start_redis(free_port(), tmp_path_factory.mktemp("redis-unit"), persistent=False)
    yield service
    service.stop()
