"""The tap's arithmetic and the floor's pattern: what `ragbus bench-bus` compares itself with
must follow the real path's traffic as it changes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

from bench.cpu import python_cpu_ms
from bench.floor import Floor, Pattern
from bench.stack import child_pids, stack_pids
from bench.tap import RequestTraffic, Seen, header_bytes, traffic_report


def request(*messages: tuple[str, str, int, str | None]) -> RequestTraffic:
    return RequestTraffic(
        [Seen(kind, subject, size, event) for kind, subject, size, event in messages]
    )


ONE = request(
    ("submission", "rag.query.submitted", 600, None),
    ("command", "rag.cmd.classify", 500, None),
    ("event", "rag.events.t.r", 700, "phase"),
    ("result", "rag.res.classify", 2000, None),
    ("command", "rag.cmd.search.vector", 1000, None),
    ("command", "rag.cmd.search.sparse", 1000, None),
    ("result", "rag.res.search.sparse", 3000, None),
    ("result", "rag.res.search.vector", 3000, None),
    ("command", "rag.cmd.fuse", 4000, None),
    ("result", "rag.res.fuse", 2000, None),
    ("event", "rag.events.t.r", 2500, "answer"),
    ("event", "rag.events.t.r", 400, "done"),
)


def test_commands_sent_with_no_result_between_them_are_one_stage() -> None:
    assert ONE.stages() == [["classify"], ["search.vector", "search.sparse"], ["fuse"]]


def test_the_report_counts_messages_bytes_and_events_per_request() -> None:
    report = traffic_report(
        {"r1": ONE, "r2": ONE}, Counter(evalsha=8, get=10), Counter(set=20), completed=2
    )
    assert report["messages_per_request"] == 12
    assert report["bytes_per_request"] == 20_700
    assert report["by_kind"]["command"] == {"messages": 4, "mean_bytes": 1625}
    assert report["step_events_per_request"] == 1 and report["saga_events_per_request"] == 2
    assert report["redis_lua_calls_per_request"] == 4
    assert report["redis_commands_per_request"] == 9
    assert report["redis_commands_inside_lua_per_request"] == 10


def test_the_floor_replays_the_tapped_pattern() -> None:
    report = traffic_report({"r1": ONE}, Counter(evalsha=6), Counter(), completed=1)
    pattern = Pattern.from_traffic(report)
    assert pattern.stages == ONE.stages()
    assert pattern.messages == 12
    assert (pattern.step_events, pattern.saga_events, pattern.commits) == (1, 2, 6)
    floor = Floor(None, None, _NoRedis(), pattern)
    assert sum(floor.events_for) == pattern.step_events
    assert floor.first_index == [0, 1, 3]
    assert floor.extra_commits == 6 - (1 + pattern.commands)


def test_a_path_without_a_submission_message_gives_a_floor_without_one() -> None:
    """The API in the orchestrator's process takes the saga's first step: no submission on
    the bus, so the floor's caller commits and sends the first commands itself."""
    taken_in_process = RequestTraffic(ONE.messages[1:])
    report = traffic_report({"r1": taken_in_process}, Counter(evalsha=6), Counter(), completed=1)
    pattern = Pattern.from_traffic(report)
    assert pattern.submissions == 0
    assert pattern.messages == 11 == report["messages_per_request"]
    assert pattern.stages == ONE.stages()
    assert Pattern.from_traffic(traffic_report({"r1": ONE}, Counter(), Counter(), 1)).submissions


def test_headers_are_counted_as_they_go_on_the_wire() -> None:
    assert header_bytes(None) == 0
    assert (
        header_bytes({"Nats-Msg-Id": "abc"})
        == len("NATS/1.0\r\n") + len("Nats-Msg-Id: abc\r\n") + 2
    )


class _NoRedis:
    def register_script(self, script: str) -> object:
        return object()


def test_the_stack_counts_its_worker_child_among_its_processes() -> None:
    """The instant stack runs as `ragbus up` does, a parent and its worker child: the CPU a
    request costs is both processes' (`bench.stack.stack_pids`, `bench.bus.python_cpu_ms`)."""
    code = (
        "import subprocess, sys, time;"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']);"
        "time.sleep(30)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while len(pids := stack_pids(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(pids) == ["ragbus", "ragbus-child"]
        assert pids["ragbus"] == parent.pid and pids["ragbus-child"] != parent.pid
    finally:
        for pid in child_pids(parent.pid):
            os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()
    per_process = {"ragbus": 8.5, "ragbus-child": 3.5, "nats-server": 2.0, "redis-server": 0.5}
    assert python_cpu_ms(per_process) == 12.0
