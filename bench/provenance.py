"""Where a report came from: the date, the machine and the command, written into every report
a `ragbus` command saves (`run`), so that the benchmark tables (`bench.tables`) can say which run
each figure is from. Figures from different machines are never compared: the machine is part
of the figure."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")
MEMINFO = Path("/proc/meminfo")
SHOWN_FLAGS = ("avx512_bf16", "avx512f", "avx2")
"""The first of these the CPU has is named: it decides how fast the encoder runs."""


def cpu_model() -> str:
    """The CPU's model name and its widest vector extension, as `/proc/cpuinfo` says."""
    model, flags = platform.processor() or platform.machine(), set[str]()
    try:
        for line in CPUINFO.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
            if flags and model:
                break
    except OSError:
        pass
    widest = next((flag for flag in SHOWN_FLAGS if flag in flags), None)
    return f"{model}, {widest.upper().replace('_', '-')}" if widest else model


def memory_gib() -> int | None:
    try:
        for line in MEMINFO.read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20)
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine() -> str:
    """One line: cores, CPU, memory, and the GPU when `nvidia-smi` names one."""
    parts = [f"{os.cpu_count() or 1} cores", cpu_model()]
    memory = memory_gib()
    if memory:
        parts.append(f"{memory} GiB")
    gpu = _gpu()
    parts.append(gpu or "no GPU")
    return ", ".join(parts)


def _output(command: list[str], cwd: Path | None = None) -> str | None:
    """What `command` printed, or None when it could not run or failed."""
    try:
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _gpu() -> str | None:
    found = _output(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    names = [line.strip() for line in (found or "").splitlines() if line.strip()]
    return " + ".join(names) if names else None


def commit() -> str | None:
    """The checkout's commit (short), with `+changes` when the work tree differs from it."""
    root = Path(__file__).resolve().parents[1]
    sha = _output(["git", "rev-parse", "--short", "HEAD"], root)
    dirty = _output(["git", "status", "--porcelain", "--untracked-files=no"], root)
    if not sha or dirty is None:
        return None
    return f"{sha}+changes" if dirty else sha


def command(argv: list[str] | None = None) -> str:
    """The command line as typed: `python -m MODULE ...` for a module of `bench` or `studies`
    run so, else the program named `ragbus` whatever ran it."""
    args = list(sys.argv if argv is None else argv)
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if argv is None and spec is not None and spec.name.startswith(("bench.", "studies.")):
        return shlex.join(["python", "-m", spec.name, *args[1:]])
    return shlex.join(["ragbus", *args[1:]])


def run_record(argv: list[str] | None = None) -> dict[str, Any]:
    """The `run` block of a report."""
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
        "command": command(argv),
        "commit": commit(),
    }
