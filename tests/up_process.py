"""A whole `ragbus up` in its own process, as an operator runs it, for the suites that drive
it from outside (fuzz, tenants)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 180.0


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
