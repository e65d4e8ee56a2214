"""A worker loads its models before it pulls a message, and only then says it is ready.

Before, a restarted worker pulled at once and loaded its encoder on the first message, holding
messages it could not serve for 15-40 s. Here a command is waiting when a classify worker
starts; while its encoder loads, the broker shows the worker holding nothing and asking for
nothing, and the readiness registry does not list it yet.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats
import pytest

from contracts import subjects as sj
from contracts.commands import ClassifyCommand
from contracts.enums import Step
from infra.runtime.bus import Bus
from infra.runtime.liveness import DEADLINES_KEY
from infra.runtime.readiness import ready_processes
from infra.runtime.redis_client import connect_redis
from infra.runtime.resources import Resources
from infra.runtime.topology import declare_topology
from infra.settings import Settings
from launcher.runtime import Runtime
from tests.integration.conftest import own_services

pytestmark = pytest.mark.integration


async def test_a_worker_loads_its_models_before_it_pulls_and_then_says_it_is_ready(
    tmp_path: Path,
) -> None:
    with own_services(tmp_path) as settings:
        await _check_warm_up(settings)


async def _check_warm_up(settings: Settings) -> None:
    nc = await nats.connect(settings.nats_url)
    redis = connect_redis(settings.redis_url)
    seen_while_loading: list[dict[str, Any]] = []
    runtime: Runtime | None = None
    try:
        js = nc.jetstream()
        await declare_topology(js, settings)
        command = ClassifyCommand(request_id="warm-1", query="Who built the Pharos?")
        await redis.zadd(DEADLINES_KEY, {command.request_id: 4e9})  # a live request
        await js.publish(
            sj.cmd_subject(Step.CLASSIFY), command.model_dump_json().encode(), stream=sj.STREAM_CMD
        )
        results = await nc.subscribe(sj.res_subject(Step.CLASSIFY))

        class ObservedResources(Resources):
            async def encoder(self) -> Any:
                if not seen_while_loading:
                    info = await js.consumer_info(sj.STREAM_CMD, "worker-classify")
                    seen_while_loading.append(
                        {
                            "held": info.num_ack_pending,
                            "pulling": info.num_waiting,
                            "waiting_commands": info.num_pending,
                            "ready": await ready_processes(redis, ["classify"]),
                        }
                    )
                    await asyncio.sleep(0.5)  # a slow model load
                return await super().encoder()

        def factory(s: Settings, bus: Bus) -> Resources:
            return ObservedResources(s, bus)

        runtime = Runtime(
            settings, orchestrator=False, workers=["classify"], resources_factory=factory
        )
        await runtime.start()
        assert seen_while_loading[0] == {
            "held": 0,
            "pulling": 0,
            "waiting_commands": 1,
            "ready": {"classify": 0},
        }
        assert await ready_processes(redis, ["classify"]) == {"classify": 1}

        message = await results.next_msg(timeout=30)
        assert json.loads(message.data)["command_id"] == command.event_id

        await runtime.stop()
        runtime = None
        assert await ready_processes(redis, ["classify"]) == {"classify": 0}
    finally:
        if runtime is not None:
            await runtime.stop()
        await nc.close()
        await redis.aclose()
