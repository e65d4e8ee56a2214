"""The CPU meter splits each named process's time into user and kernel time, so a profile
that cannot see the kernel (py-spy) can be read beside the share it misses."""

from __future__ import annotations

import os
import socket
import time

from bench.cpu import CpuMeter, CpuUsage, process_times_s


def test_a_process_that_works_in_the_kernel_shows_it() -> None:
    meter = CpuMeter({"self": os.getpid()})
    meter.start()
    left, right = socket.socketpair()
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:  # small sends and receives: system time
        left.send(b"x" * 64)
        right.recv(64)
    left.close()
    right.close()
    usage = meter.stop()
    assert usage.processes["self"] > 0
    assert 0 < usage.kernel["self"] <= usage.processes["self"]
    share = usage.report(1)["process_kernel_share"]["self"]
    assert 0 < share <= 1


def test_the_share_is_left_out_for_a_process_that_spent_nothing() -> None:
    usage = CpuUsage(1.0, 1.0, 0.0, processes={"idle": 0.0, "busy": 2.0}, kernel={"busy": 0.5})
    assert usage.report(10)["process_kernel_share"] == {"busy": 0.25}


def test_a_gone_process_has_no_times() -> None:
    assert process_times_s(2**22 + 12345) is None
