"""A whole `ragbus up` in its own process, on its own nats-server and redis-server, for the fuzz
suites: schemathesis calls it synchronously, so it cannot share the test's event loop."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from infra.runtime.services import LocalService, free_port, start_nats, start_redis
from tests.up_process import ragbus_up

READY_TIMEOUT_S = 180.0
SCALE = max(1, int(os.environ.get("RAGBUS_FUZZ_SCALE", "1")))
"""How many times the usual number of examples to try: `make soak` sets it, `make test` not."""
FUZZ_TOKEN = "fuzz-token-0123456789"
"""The stack runs with bearer auth on, so the fuzzer also checks that it is enforced."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give each API operation's test its own node id. Schemathesis names the items by
    operation (`test_x[POST /v1/queries]`) but leaves every node id the function's, and
    pytest-xdist schedules and reports by node id: it would run one operation of the 24."""
    for item in items:
        if item.parent is None or item.nodeid.endswith(f"::{item.name}"):
            continue
        if hasattr(item, "_id"):  # pytest 9
            item._id = item.parent.id.child(item.name)
        else:  # pytest 8
            item._nodeid = f"{item.parent.nodeid}::{item.name}"


@dataclass(frozen=True)
class UpStack:
    url: str
    nats_url: str
    redis_url: str
    process: subprocess.Popen[bytes]


@pytest.fixture(scope="session")
def up_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    root = tmp_path_factory.mktemp("fuzz-stack")
    services: list[LocalService] = [
        start_nats(free_port(), root / "nats"),
        start_redis(free_port(), root / "redis", persistent=False),
    ]
    port = free_port()
    env = {
        **os.environ,
        "RAGBUS_NATS_URL": services[0].url,
        "RAGBUS_REDIS_URL": services[1].url,
        "RAGBUS_DATA_DIR": str(root / "data"),
        "RAGBUS_START_SERVICES": "false",
        "RAGBUS_API_PORT": str(port),
        "RAGBUS_API_TOKEN": FUZZ_TOKEN,
        "RAGBUS_LOG_LEVEL": "WARNING",
        # the fuzzer offers a wrong key on purpose, thousands of times, and expects 401 for
        # each: slowing an address's wrong keys (429) is test_tenant_credentials.py's to test
        "RAGBUS_AUTH_FAILURE_LIMIT": "0",
    }
    url = f"http://127.0.0.1:{port}"
    try:
        with ragbus_up(env, root / "up.log", url, READY_TIMEOUT_S) as process:
            yield UpStack(url, services[0].url, services[1].url, process)
    finally:
        for service in services:
            service.stop()
