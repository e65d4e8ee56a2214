"""Stopping never hangs on one part: a broker stuck on a vanished server still lets the
process stop the rest, including the local services it started."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from infra.settings import Settings
from launcher import runtime as launcher


class StuckBroker:
    async def stop(self) -> None:
        await asyncio.Event().wait()  # never returns, like a consumer spinning on a dead link


class FailingResources:
    async def aclose(self) -> None:
        raise ConnectionError("redis went away")


class RecordingServices:
    stopped = False

    def stop(self) -> None:
        self.stopped = True


async def test_a_stuck_broker_does_not_keep_the_services_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launcher, "STOP_STEP_TIMEOUT_S", 0.1)
    runtime = launcher.Runtime(Settings(data_dir=tmp_path), orchestrator=False, workers=())
    services = RecordingServices()
    parts: dict[str, Any] = {
        "broker": StuckBroker(),
        "resources": FailingResources(),
        "services": services,
    }
    for name, part in parts.items():
        setattr(runtime, name, part)
    await asyncio.wait_for(runtime.stop(), 5)
    assert services.stopped
