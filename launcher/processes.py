"""`ragbus up` on more than one core: the child process that runs the other worker kinds.

One Python process is one GIL: under load `ragbus up` in one process kept a single core busy
while the other waited. With two processes the API, the saga, the classifier, generation and
the critic run in the parent (`launcher.runtime.UP_PARENT`) and every other worker kind in a
child started with `python -m cli worker <kinds>`, on the services the parent found or
started, with the parent's `RAGBUS_HOST_PROCESSES` (how many stacks share the cores:
`infra.threads`). The parent restarts a child that dies (at most
`CHILD_RESTARTS` times a minute, then it stops too, so a supervisor sees the failure) and
stops it before the services it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Sequence

from infra.logging import get_logger
from infra.settings import Settings

log = get_logger(__name__)

STOP_TIMEOUT_S = 15.0
CLI_WORKER = ("-m", "cli", "worker")
"""How the child is started by default: `python -m cli worker <kinds>`."""


class WorkerChild:
    def __init__(
        self,
        settings: Settings,
        kinds: Sequence[str],
        *,
        restarts: int,
        window_s: float,
        entry: Sequence[str] = CLI_WORKER,
    ) -> None:
        self.settings = settings
        self.entry = tuple(entry)
        """The child's `python` arguments before its kinds (the bus benchmark's instant stack
        starts its own module)."""
        self.kinds = list(kinds)
        self.restarts = restarts
        self.window_s = window_s
        self.process: asyncio.subprocess.Process | None = None
        self.failed: str | None = None
        self._stopping = False

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "RAGBUS_NATS_URL": self.settings.nats_url,
            "RAGBUS_REDIS_URL": self.settings.redis_url,
            **(
                {"RAGBUS_NATS_CREDS": str(self.settings.nats_creds)}
                if self.settings.nats_creds
                else {}
            ),
            "RAGBUS_DATA_DIR": str(self.settings.data_dir.resolve()),
            "RAGBUS_START_SERVICES": "false",
            # the child sizes its thread pools to the same share of the cores as this process
            "RAGBUS_HOST_PROCESSES": str(self.settings.host_processes),
        }

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, *self.entry, *self.kinds, env=self._env()
        )
        log.info("worker_process_started", pid=self.process.pid, workers=self.kinds)

    async def supervise(self, stop: asyncio.Event) -> None:
        """Restart the child when it exits on its own; set `stop` when it keeps dying."""
        exits: list[float] = []
        while not self._stopping:
            assert self.process is not None
            code = await self.process.wait()
            if self._stopping:
                return
            now = time.monotonic()
            exits = [t for t in exits if now - t < self.window_s] + [now]
            log.error("worker_process_exited", code=code, workers=self.kinds, exits=len(exits))
            if len(exits) > self.restarts:
                self.failed = (
                    f"the worker process ({', '.join(self.kinds)}) exited {len(exits)} times "
                    f"within {self.window_s:g} s, last with code {code}"
                )
                stop.set()
                return
            await asyncio.sleep(1.0)
            await self.start()

    async def stop(self) -> None:
        self._stopping = True
        process = self.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            log.warning("worker_process_killed", pid=process.pid, timeout_s=STOP_TIMEOUT_S)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        log.info("worker_process_stopped", pid=process.pid, code=process.returncode)
