"""CPU time spent while a benchmark runs: the whole machine's, the load generator's own, and
what is left for the system under test (every ragbus process, nats-server, redis-server).

The machine's busy time comes from `/proc/stat` (Linux); on a dedicated benchmark machine
that is the honest cost of a request, whichever process spent it. The load generator's own
time is subtracted, since it is not part of the product.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROC_STAT = Path("/proc/stat")
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
"""user, nice, system, irq, softirq, steal (idle and iowait are not busy)."""


def machine_busy_s() -> float | None:
    """Seconds of CPU the whole machine has been busy since boot, or None off Linux."""
    try:
        first = PROC_STAT.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    ticks = [int(value) for value in first[1:]]
    return sum(ticks[i] for i in BUSY_FIELDS if i < len(ticks)) / os.sysconf("SC_CLK_TCK")


def process_times_s(pid: int) -> tuple[float, float] | None:
    """(user, system) seconds a process (its threads included) has spent, or None if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def process_cpu_s(pid: int) -> float | None:
    """User + system seconds a process (its threads included) has spent, or None if gone."""
    times = process_times_s(pid)
    return None if times is None else times[0] + times[1]


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class CpuUsage:
    wall_s: float
    machine_s: float | None
    client_s: float
    processes: dict[str, float] = field(default_factory=dict)
    """CPU seconds of named processes of the system under test, when their pids were given."""
    kernel: dict[str, float] = field(default_factory=dict)
    """Of those, the seconds each spent in the kernel (system time: its sockets' sends and
    receives, its waits): a sampling profiler of Python frames cannot tell them apart."""

    @property
    def server_s(self) -> float | None:
        """CPU seconds spent by everything but the load generator."""
        return None if self.machine_s is None else max(0.0, self.machine_s - self.client_s)

    def report(self, requests: int) -> dict[str, Any]:
        per = max(requests, 1)
        server = self.server_s
        by_process = {
            name: round(seconds / per * 1000, 3) for name, seconds in self.processes.items()
        }
        return {
            "process_cpu_ms_per_request": by_process,
            "process_kernel_share": {
                name: round(self.kernel[name] / seconds, 3)
                for name, seconds in self.processes.items()
                if seconds > 0 and name in self.kernel
            },
            "server_cpu_s": _round(server),
            "client_cpu_s": round(self.client_s, 3),
            "server_cpu_ms_per_request": _round(None if server is None else server / per * 1000),
            "client_cpu_ms_per_request": round(self.client_s / per * 1000, 3),
            "server_cores_busy": _round(None if server is None else server / self.wall_s),
            "cores": os.cpu_count(),
        }


class CpuMeter:
    """`start()` then `stop()`: the CPU each side spent in between; `pids` names processes of
    the system under test to account for one by one."""

    def __init__(self, pids: dict[str, int] | None = None) -> None:
        self._pids = dict(pids or {})
        self._t0 = 0.0
        self._machine0: float | None = None
        self._own0 = 0.0
        self._proc0: dict[str, tuple[float, float] | None] = {}

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._machine0 = machine_busy_s()
        self._own0 = own_cpu_s()
        self._proc0 = {name: process_times_s(pid) for name, pid in self._pids.items()}

    def stop(self) -> CpuUsage:
        machine = machine_busy_s()
        spent = None if machine is None or self._machine0 is None else machine - self._machine0
        processes: dict[str, float] = {}
        kernel: dict[str, float] = {}
        for name, pid in self._pids.items():
            before, after = self._proc0.get(name), process_times_s(pid)
            if before is not None and after is not None:
                processes[name] = (after[0] - before[0]) + (after[1] - before[1])
                kernel[name] = after[1] - before[1]
        return CpuUsage(
            wall_s=time.perf_counter() - self._t0,
            machine_s=spent,
            client_s=own_cpu_s() - self._own0,
            processes=processes,
            kernel=kernel,
        )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


SERVERS = ("nats-server", "redis-server")
API_PROCESS = "ragbus"
STORES_PROCESS = "ragbus-child"
REPLICA_PROCESS = "ragbus-replica"
"""How a stack's processes are named (`bench.stack.stack_pids`): `ragbus up`'s own process
(the API, the saga, classification, generation, the critic), its worker child, which owns
the embedded stores, and that child's search replicas (`RAGBUS_SEARCH_REPLICAS`)."""


def python_cpu_ms(per_process: dict[str, float | None]) -> float:
    """The ms a request of a stack's own Python processes (`ragbus` and its worker child,
    `ragbus-child`), from `process_cpu_ms_per_request`: every process but the servers."""
    return sum(v or 0.0 for k, v in per_process.items() if k not in SERVERS)
