"""Where a request's CPU goes: a py-spy profile of the stack under load, as a ledger.

`ragbus bench-bus --profile` records the instant stack's process with py-spy while the closed
loop runs, and files every sample three ways:
- by **role**, the part of ragbus whose code is on the stack: the API (the HTTP submission
  and the SSE relay), the saga, each worker kind, nats-py's read and flush loops, or the
  runtime around them (FastStream's consume path before a handler, Redis replies read by the
  event loop, the loop itself);
- by **layer**, the package of the innermost frame: pydantic, FastStream, nats-py, redis-py,
  the HTTP stack, asyncio and its sockets, ragbus's own code, the standard library;
- by **part** against the floor: the messaging layers the floor is made of (nats-py,
  redis-py, asyncio and the sockets), or one of the things it leaves out (the steps' own work,
  HTTP and SSE, pydantic, the saga, FastStream, the runtime's own code, observability).

Multiplied by the process's CPU per request, the shares say how many milliseconds of a request
each role and layer costs, beside the floor's total (`bench.floor`): the parts the floor leaves
out (HTTP, SSE, validation, the engines' own work) and the parts it shares.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

FRAME = re.compile(r"^(?P<func>.*) \((?P<path>[^()]*):(?P<line>\d+)\)$")
RAGBUS_PACKAGES = (
    "orchestrator/",
    "workers/",
    "engines/",
    "infra/",
    "contracts/",
    "api/",
    "launcher/",
)
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pydantic", ("pydantic/", "pydantic_core/")),
    ("FastStream", ("faststream/", "fast_depends/")),
    ("nats-py", ("nats/",)),
    ("redis-py", ("redis/", "hiredis/")),
    ("HTTP and SSE", ("uvicorn/", "starlette/", "fastapi/", "h11/", "sse_starlette/")),
    ("asyncio, anyio and sockets", ("asyncio/", "selectors.py", "socket.py", "anyio/")),
    ("logs, traces, metrics", ("structlog/", "logging/", "opentelemetry/", "prometheus_client/")),
    ("numpy", ("numpy/",)),
    ("ragbus's own code", (*RAGBUS_PACKAGES, "bench/")),
)
OTHER_LAYER = "the standard library and the rest"


def parse_frames(stack: str) -> list[tuple[str, str]]:
    """A py-spy raw stack (`func (path:line);...`, outermost first) as (function, path)."""
    frames = []
    for text in stack.split(";"):
        match = FRAME.match(text)
        if match:
            frames.append((match["func"], match["path"]))
    return frames


ENGINES_IN_THREADS = "engines in their threads (the encoder, the stores)"
"""A real stack's models and stores run off the event loop, in thread pools that no worker's
frame is on: the query's encoding, mostly (and an engine's code, `engines/`, run there). Only a
real stack's profile has them (`record` pointed at `ragbus up` under `ragbus bench`); the
instant stack of `bench-bus` has none."""


def role(frames: list[tuple[str, str]]) -> str:
    """The outermost part of ragbus on the stack."""
    found = "runtime (consume paths, Redis replies, the event loop)"
    for _, path in frames:
        if path.startswith("api/"):
            return "API (submission, SSE relay)"
        if path.startswith("orchestrator/"):
            return "saga"
        if path.startswith("workers/"):
            return f"worker: {path.split('/')[1].removesuffix('.py')}"
        if path.startswith(("engines/", "infra/retrieval/")):  # run in a thread pool
            return ENGINES_IN_THREADS
        if path.startswith(("uvicorn/", "starlette/", "fastapi/")):
            found = "API (submission, SSE relay)"
        elif path.startswith("nats/aio/client.py") and found.startswith("runtime"):
            found = "nats-py read and flush loops"
    return found


def layer(path: str) -> str:
    for name, prefixes in LAYERS:
        if path.startswith(prefixes):
            return name
    return OTHER_LAYER


MESSAGING = "messaging: nats-py, redis-py, asyncio and sockets (what the floor is made of)"
PARTS: dict[str, str] = {
    "steps": "the steps' own work (generation, critique, fusion, classification)",
    "http": "HTTP and SSE at the ends",
    "pydantic": "contracts: pydantic's parsing and JSON",
    "saga": "the saga's decisions and commits",
    "runtime": "the runtime's own code (phase events, claims, liveness, error policy)",
    "faststream": "FastStream's consume path",
    "observability": "logs, traces, metrics",
    "messaging": MESSAGING,
}
"""Each sample against the floor (`bench.floor`, plain nats-py and redis-py in one process):
the floor runs only the messaging layers; every other part is something it leaves out."""
_MESSAGING_LAYERS = frozenset({"nats-py", "redis-py", "asyncio, anyio and sockets"})
_PART_OF_LAYER = {
    "pydantic": PARTS["pydantic"],
    "FastStream": PARTS["faststream"],
    "HTTP and SSE": PARTS["http"],
    "logs, traces, metrics": PARTS["observability"],
}


def part(frames: list[tuple[str, str]]) -> str:
    """What a sample was doing, set against what the floor does: by its innermost layer where
    that layer says it (messaging, pydantic, FastStream, HTTP, observability), else by the
    role whose code it is (a worker's own code is its step's work)."""
    innermost = layer(frames[-1][1])
    if innermost in _MESSAGING_LAYERS:
        return PARTS["messaging"]
    if innermost in _PART_OF_LAYER:
        return _PART_OF_LAYER[innermost]
    owner = role(frames)
    if owner.startswith(("worker:", "engines")):
        return PARTS["steps"]
    if owner.startswith("API"):
        return PARTS["http"]
    if owner == "saga":
        return PARTS["saga"]
    if owner.startswith("nats-py"):
        return PARTS["messaging"]
    return PARTS["runtime"]


def samples(lines: Iterable[str]) -> Iterator[tuple[list[tuple[str, str]], int]]:
    """py-spy's raw lines (`stack count`) as (frames, count); a line that is neither is
    skipped."""
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        frames = parse_frames(stack)
        if frames and count.isdigit():
            yield frames, int(count)


def ledger(lines: Iterable[str], cpu_ms_per_request: float | None) -> dict[str, Any]:
    """Shares of the samples by role, by layer and by part against the floor (and in ms a
    request, given the CPU)."""
    by_role: Counter[str] = Counter()
    by_layer: Counter[str] = Counter()
    by_part: Counter[str] = Counter()
    total = 0
    for frames, n in samples(lines):
        total += n
        by_role[role(frames)] += n
        by_layer[layer(frames[-1][1])] += n
        by_part[part(frames)] += n

    def rows(counter: Counter[str]) -> list[dict[str, Any]]:
        out = []
        for name, n in counter.most_common():
            share = n / total
            row: dict[str, Any] = {"name": name, "share": round(share, 4)}
            if cpu_ms_per_request:
                row["ms_per_request"] = round(share * cpu_ms_per_request, 2)
            out.append(row)
        return out

    return {
        "samples": total,
        "by_role": rows(by_role),
        "by_layer": rows(by_layer),
        "by_part": rows(by_part),
    }


async def record(
    pid: int,
    *,
    delay_s: float,
    seconds: float,
    rate: int = 100,
    subprocesses: bool = False,
    gil: bool = False,
) -> list[str]:
    """py-spy's raw samples of `pid` (and of its children, with `subprocesses`) for `seconds`,
    starting after `delay_s`; with `gil`, only of the thread holding the GIL."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    await asyncio.sleep(delay_s)
    with tempfile.TemporaryDirectory(prefix="ragbus-ledger-") as tmp:
        out = Path(tmp) / "samples.txt"
        child = await asyncio.create_subprocess_exec(
            spy, "record", "--format", "raw", "--nonblocking",
            "-r", str(rate), "-d", str(max(1, round(seconds))), "-p", str(pid), "-o", str(out),
            *(["--subprocesses"] if subprocesses else []),
            *(["--gil"] if gil else []),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await child.communicate()
        if child.returncode != 0 or not out.exists():
            raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-500:]}")
        return out.read_text().splitlines()
