"""A whole `ragbus up` in its own process, as an operator runs it, for the suites that drive
it from outside (fuzz, tenants)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 180.0
STEP_DEADLINES = {
    "GENERATE_TIMEOUT_S": "90",
    "SEARCH_TIMEOUT_S": "60",
    "CLASSIFY_TIMEOUT_S": "60",
    "FUSE_TIMEOUT_S": "60",
    "CRITIC_TIMEOUT_S": "60",
}
"""Generous: a busy machine (CI runs on a developer's) never degrades a step a test asserts."""


def tenants_env(
    root: Path, api_port: int, nats_port: int, admin: str, **settings: str
) -> dict[str, str]:
    """The environment of a `ragbus up` in `tenants` mode that starts its own nats-server and
    redis-server (free ports, data under `root`), with `admin` as its admin token and generous
    step deadlines; `settings`: more, or other, `RAGBUS_*` values by the name after the prefix
    (`LOG_LEVEL="INFO"`)."""
    from infra.runtime.services import free_port

    values = {
        "AUTH_MODE": "tenants",
        "ADMIN_TOKEN": admin,
        "NATS_URL": f"nats://127.0.0.1:{nats_port}",
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "START_SERVICES": "true",
        "DATA_DIR": str(root / "data"),
        "API_PORT": str(api_port),
        "LOG_LEVEL": "WARNING",
        **STEP_DEADLINES,
        **settings,
    }
    return {**os.environ, **{f"RAGBUS_{name}": value for name, value in values.items()}}


def ragbus_cli(
    env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`python -m cli ARGS` with `env`, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextmanager
def ragbus_up(
    env: dict[str, str], log: Path, url: str, timeout_s: float = READY_TIMEOUT_S
) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m cli up` with `env`, once `{url}/readyz` answers 200; stopped on exit."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli", "up"], cwd=ROOT, env=env, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            assert process.poll() is None, f"ragbus up exited: {log.read_text()[-3000:]}"
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "ragbus up was not ready in time"
            time.sleep(0.3)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
