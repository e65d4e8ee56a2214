"""Threads per process: each ragbus process sizes its compute pools to its share of the cores.

N processes on one machine that each size their pools to every core oversubscribe it N times:
two `ragbus up` stacks ingesting side by side on 2 cores ran about eight times slower than one
alone (issue 22). Each process takes cores ÷ processes instead, where cores are the ones this
process may run on (its CPU affinity, so a container's or taskset's limit counts) and processes
is `RAGBUS_HOST_PROCESSES` (0 = one: a `ragbus up` stack counts as one, since its processes
take turns, and passes the setting to its child). The pools that follow the share: torch's
intra-op threads (the encoder, BGE-M3, the NLI model, the reranker), ONNX Runtime's intra-op
threads and the tokenizers' Rust thread pool.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from infra.settings import Settings


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity, else every core of the machine."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no sched_getaffinity on macOS and Windows
        return os.cpu_count() or 1


def available_memory() -> int | None:
    """The machine's MemAvailable in bytes, from /proc/meminfo (None where it is not)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def host_processes(settings: Settings) -> int:
    """The ragbus processes sharing this machine's cores (`RAGBUS_HOST_PROCESSES`, 0 = one)."""
    return settings.host_processes or 1


def thread_share(settings: Settings) -> int:
    """This process's share of the cores: cores ÷ processes, at least one thread."""
    return max(1, available_cores() // host_processes(settings))


def limit_tokenizer_threads(threads: int) -> None:
    """The tokenizers' Rust (rayon) pool, sized once when first used: `threads`, unless the
    environment already names a size (call before the first tokenizer runs)."""
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))


def set_torch_threads(threads: int) -> None:
    """torch's intra-op pool for this process (process-wide), one inter-op thread."""
    import torch

    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # already set, or parallel work already ran
        torch.set_num_interop_threads(1)


def cap_torch_threads(settings: Settings) -> None:
    """torch's intra-op pool no larger than this process's share of the cores; a smaller size
    another model set (the encoder's) is kept: for models loaded beside the encoder."""
    import torch

    set_torch_threads(min(torch.get_num_threads(), thread_share(settings)))
