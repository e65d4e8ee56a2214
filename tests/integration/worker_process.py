"""A worker process for crash tests: `python -m tests.integration.worker_process KIND`.

With `--stall`, the fuse step writes FILE when it holds a message and then hangs the
whole process (as a wedged worker would) until someone kills it.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from infra.settings import Settings
from launcher.runtime import Runtime


def stall_fuse(marker: Path) -> None:
    import engines.fuse.pipeline as fusion

    def wedged(*args: object, **kwargs: object) -> object:
        marker.write_text("holding")
        time.sleep(3600)  # blocks the event loop: no acks, no heartbeats, like a hung process
        raise AssertionError("unreachable")

    fusion.effective_weights = wedged  # type: ignore[assignment]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind")
    parser.add_argument("--stall", type=Path)
    parser.add_argument("--ready", type=Path, required=True)
    args = parser.parse_args()
    if args.stall:
        stall_fuse(args.stall)
    runtime = Runtime(Settings(), orchestrator=False, workers=[args.kind])
    await runtime.start()
    args.ready.write_text("ready")
    try:
        await asyncio.Event().wait()
    finally:
        await runtime.stop()


if __name__ == "__main__":
    asyncio.run(main())
