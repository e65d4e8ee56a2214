"""Failing well (issue 45): `ragbus up` stops on SIGTERM and SIGINT while it starts and while
it serves, a second signal kills what is left at once, and a start that cannot work (a taken
API port, no NATS or no Redis it may not start, an unusable data directory, a data directory
another `ragbus up` owns) ends at once: exit code 1, one sentence on stderr, no traceback, and
nothing left running.

Every `ragbus up` here runs on free ports with a data directory of its own; where it starts
its own nats-server and redis-server it does so on free ports too. What is "left running" is
checked by PID (every process below `ragbus up`, seen while it ran) and by port, and by any
process whose environment names the test's data directory. How long each stop took is printed
(`pytest -rP` shows it) and asserted under 10 s."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from infra.runtime.services import free_port, start_nats
from tests.environment import child_environment

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STOP_LIMIT_S = 10.0
READY_TIMEOUT_S = 90.0

try:
    import psutil
except ImportError:  # pragma: no cover - /proc is enough on Linux
    psutil = None


def descendants(pid: int) -> set[int]:
    if psutil is not None:
        try:
            return {p.pid for p in psutil.Process(pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            return set()
    found: set[int] = set()
    queue = [pid]
    while queue:
        parent = queue.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = {int(c) for c in (task / "children").read_text().split()}
            except OSError:
                continue
            queue += list(kids - found)
            found |= kids
    return found


def alive(pid: int) -> bool:
    """Running: not gone, and not a zombie nobody reaped yet."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        state = stat.read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def naming(data_dir: Path) -> set[int]:
    """Live processes started for this data directory: its path in their environment or on
    their command line (the worker child, a nats-server, a redis-server)."""
    needle = str(data_dir).encode()
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            text = (proc / "environ").read_bytes() + (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in text and alive(int(proc.name)):
            found.add(int(proc.name))
    return found


def importing_ours(pid: int) -> bool:
    """Whether the process is past Python's own start-up and into the CLI's imports: pydantic's
    compiled core, which the settings bring in first, is mapped (`/proc/<pid>/maps`)."""
    try:
        return "pydantic_core" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Up:
    """A `ragbus up` on free ports: its own services (RAGBUS_START_SERVICES, the default) or
    those `env` names; every process below it is remembered while it runs."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.data_dir = tmp_path / "data"
        self.api_port = free_port()
        self.nats_port = free_port()
        self.redis_port = free_port()
        self.env = {
            **child_environment(),
            "RAGBUS_NATS_URL": f"nats://127.0.0.1:{self.nats_port}",
            "RAGBUS_REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "RAGBUS_DATA_DIR": str(self.data_dir),
            "RAGBUS_API_PORT": str(self.api_port),
            "RAGBUS_UP_PROCESSES": "2",
            "RAGBUS_LOG_LEVEL": "WARNING",
            **env,
        }
        self.log = tmp_path / "up.log"
        self.err = tmp_path / "up.err"
        self.seen: set[int] = set()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *command: str, group: bool = False) -> subprocess.Popen[bytes]:
        """`ragbus up`, or another command (`worker classify`, `api`); with `group`, leading a
        process group of its own, as a shell's foreground job does (`ctrl_c`)."""
        with self.log.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cli", *(command or ("up",))],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=err,
                process_group=0 if group else None,
            )
        return self.process

    def ctrl_c(self) -> None:
        """What Ctrl-C at a terminal does: SIGINT to every process of the foreground group
        (`start(group=True)`), children included, not to the command alone."""
        assert self.process is not None
        self.look()
        os.killpg(self.process.pid, signal.SIGINT)

    def stdout(self) -> str:
        return self.log.read_text(errors="replace")

    def make(self, target: str, **variables: str) -> subprocess.Popen[bytes]:
        """`make <target>` in the checkout, as a newcomer types it, with this venv."""
        with self.log.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(
                ["make", "--no-print-directory", target, f"VENV={sys.prefix}"]
                + [f"{name}={value}" for name, value in variables.items()],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=err,
            )
        return self.process

    def look(self) -> set[int]:
        assert self.process is not None
        now = descendants(self.process.pid)
        self.seen |= now
        return now

    def wait_for(self, condition: object, what: str, timeout: float = READY_TIMEOUT_S) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.look()
            assert self.process.poll() is None, f"ragbus up exited: {self.stderr()[-3000:]}"
            if condition():  # type: ignore[operator]
                return
            time.sleep(0.05)
        raise AssertionError(f"ragbus up: {what} within {timeout:.0f} s")

    def ready(self) -> bool:
        try:
            response = httpx.get(f"http://127.0.0.1:{self.api_port}/readyz", timeout=1)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def worker_children(self) -> list[int]:
        """`python -m cli worker …` below it (an argument `worker`, not a path that holds the
        word, as a test's own temporary folder may)."""
        assert self.process is not None
        found = []
        for pid in descendants(self.process.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"worker" in argv:
                found.append(pid)
        return found

    def has_worker_child(self) -> bool:
        return bool(self.worker_children())

    def stop_with(self, *signals: signal.Signals) -> tuple[int, float]:
        """Send the signals, one after the other; (exit code, seconds until it exited)."""
        assert self.process is not None
        self.look()
        started = time.monotonic()
        for sig in signals:
            self.process.send_signal(sig)
            time.sleep(0.05)
        try:
            code = self.process.wait(STOP_LIMIT_S + 20)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - started
        assert code is not None, f"ragbus up still runs {took:.0f} s after {signals}"
        return code, took

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def assert_nothing_left(self) -> None:
        time.sleep(0.2)
        left = {pid for pid in self.seen if alive(pid)} | naming(self.data_dir)
        for port in (self.api_port, self.nats_port, self.redis_port):
            assert not listening(port), f"port {port} still answers"
        assert not left, f"left running: {left}"

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.look()
            self.process.kill()
            self.process.wait(10)
        for pid in self.seen | naming(self.data_dir):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    stack = Up(tmp_path)
    yield stack
    stack.kill()


def sentence(stderr: str) -> str:
    """The one `ragbus: ` line of stderr (every other line is a JSON log line)."""
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith("ragbus: ")]
    assert len(lines) == 1, stderr[-3000:]
    others = [
        line for line in stderr.splitlines() if line and not line.startswith(("ragbus: ", "{"))
    ]
    assert not others, others
    return lines[0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_signal_while_starting_stops_everything(up: Up, sig: signal.Signals) -> None:
    """Sent as soon as `ragbus up` has started its services and its worker child, while both
    load their models: long before /readyz answers."""
    up.start()
    up.wait_for(up.has_worker_child, "a worker child")
    assert not up.ready()
    code, took = up.stop_with(sig)
    print(f"stop while starting, {sig.name}: {took:.2f} s, exit {code}")
    assert code == 0, up.stderr()[-3000:]
    assert took < STOP_LIMIT_S
    assert "Traceback" not in up.stderr()
    assert len(up.seen) >= 3  # nats-server, redis-server, the worker child
    up.assert_nothing_left()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_signal_while_serving_stops_everything(up: Up, sig: signal.Signals) -> None:
    up.start()
    up.wait_for(up.ready, "ready")
    code, took = up.stop_with(sig)
    print(f"stop while serving, {sig.name}: {took:.2f} s, exit {code}")
    assert code == 0, up.stderr()[-3000:]
    assert took < STOP_LIMIT_S
    assert "Traceback" not in up.stderr()
    up.assert_nothing_left()


def test_a_second_signal_kills_what_is_left_at_once(up: Up) -> None:
    up.start()
    up.wait_for(up.has_worker_child, "a worker child")
    code, took = up.stop_with(signal.SIGTERM, signal.SIGINT)
    print(f"stop on a second signal (SIGTERM, SIGINT) while starting: {took:.2f} s, exit {code}")
    assert code == 128 + signal.SIGINT
    assert took < 2.0
    up.assert_nothing_left()


@pytest.mark.parametrize("command", [("up",), ("demo", "--no-serve")], ids=["up", "demo"])
def test_a_taken_api_port_ends_the_start_at_once(up: Up, command: tuple[str, ...]) -> None:
    """`ragbus up`, and `make demo` on a laptop where something already listens on 8000."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", up.api_port))
        taken.listen()
        started = time.monotonic()
        code = up.start(*command).wait(30)
        took = time.monotonic() - started
        up.look()
    assert code == 1
    assert sentence(up.stderr()) == (
        f"ragbus: port {up.api_port} (RAGBUS_API_PORT) is in use by another program; stop it "
        "or set RAGBUS_API_PORT to a free port"
    )
    print(f"taken API port, ragbus {command[0]}: exit after {took:.2f} s")
    up.assert_nothing_left()
    assert not (up.data_dir / "nats").exists()  # before any service started


MADE = (Path(sys.prefix) / ".installed").exists()
"""`make setup` made this venv: `make demo` finds it set up and goes on to the demo."""


@pytest.mark.skipif(not MADE, reason="this venv was not made by `make setup`")
def test_make_demo_on_a_taken_port_ends_in_one_sentence(up: Up) -> None:
    """The newcomer's very first command, on a laptop where something already listens on the
    API's port: `make demo` finds the setup done, trains the intent model into the (new) data
    directory (a small one: two queries an intent), and its `ragbus demo` ends at once in the
    sentence; make says the recipe failed and exits 2, and nothing is left running."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", up.api_port))
        taken.listen()
        code = up.make("demo", INTENT_ARGS="--per-class 2").wait(180)
        up.look()
    assert code == 2, up.stderr()[-3000:]
    stderr = up.stderr()
    assert "Traceback" not in stderr, stderr[-3000:]
    said = [line for line in stderr.splitlines() if line.startswith("ragbus: ")]
    assert said == [
        f"ragbus: port {up.api_port} (RAGBUS_API_PORT) is in use by another program; stop it "
        "or set RAGBUS_API_PORT to a free port"
    ], stderr[-3000:]
    assert (up.data_dir / "intent-model" / "meta.json").exists()
    up.assert_nothing_left()


def test_no_nats_it_may_not_start_ends_the_start_at_once(tmp_path: Path) -> None:
    up = Up(tmp_path, RAGBUS_START_SERVICES="false")
    try:
        code = up.start().wait(30)
        assert code == 1
        assert sentence(up.stderr()) == (
            f"ragbus: NATS is not reachable at nats://127.0.0.1:{up.nats_port} (RAGBUS_NATS_URL) "
            "and RAGBUS_START_SERVICES is false; start NATS there, point RAGBUS_NATS_URL at a "
            "running server, or set RAGBUS_START_SERVICES=true"
        )
        up.assert_nothing_left()
    finally:
        up.kill()


def test_no_redis_it_may_not_start_ends_the_start_at_once(tmp_path: Path) -> None:
    nats = start_nats(free_port(), tmp_path / "nats")
    up = Up(tmp_path, RAGBUS_START_SERVICES="false", RAGBUS_NATS_URL=nats.url)
    try:
        code = up.start().wait(30)
        assert code == 1
        assert sentence(up.stderr()) == (
            f"ragbus: Redis is not reachable at redis://127.0.0.1:{up.redis_port}/0 "
            "(RAGBUS_REDIS_URL) and RAGBUS_START_SERVICES is false; start Redis there, point "
            "RAGBUS_REDIS_URL at a running server, or set RAGBUS_START_SERVICES=true"
        )
        up.assert_nothing_left()
        assert nats.process.poll() is None  # a NATS it found is not its to stop
    finally:
        up.kill()
        nats.stop()


def test_an_unusable_data_directory_ends_the_start_at_once(tmp_path: Path) -> None:
    """Tests run as root here, where no mode keeps a directory from its owner: a data
    directory under a regular file cannot be created by anyone."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    up = Up(tmp_path, RAGBUS_DATA_DIR=str(blocker / "data"))
    up.data_dir = blocker / "data"
    try:
        code = up.start().wait(30)
        assert code == 1
        assert sentence(up.stderr()) == (
            f"ragbus: the data directory {blocker / 'data'} (RAGBUS_DATA_DIR) cannot be used "
            f"(not a directory: {blocker / 'data'}); set RAGBUS_DATA_DIR to a directory this "
            "user can create, read and write"
        )
        up.assert_nothing_left()
    finally:
        up.kill()


def test_a_second_up_on_the_same_data_directory_refuses(tmp_path: Path) -> None:
    """The first one holds `<data>/.lock` from its first step; its own worker child is let
    through, a second `ragbus up` is not, before it starts anything."""
    first = Up(tmp_path / "first")
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    second = Up(tmp_path / "second", RAGBUS_DATA_DIR=str(first.data_dir))
    second.data_dir = tmp_path / "second" / "data"  # what only the second would make
    try:
        process = first.start()
        first.wait_for(first.has_worker_child, "a worker child")
        code = second.start().wait(30)
        second.look()
        assert code == 1
        assert sentence(second.stderr()) == (
            f"ragbus: the data directory {first.data_dir} is in use by another ragbus process "
            f"(PID {process.pid}); stop that process, or set RAGBUS_DATA_DIR to another "
            "directory"
        )
        assert not listening(second.nats_port) and not listening(second.redis_port)
        assert not second.seen and not naming(second.data_dir)
        assert process.poll() is None and first.has_worker_child()  # the first goes on
        code, took = first.stop_with(signal.SIGTERM)
        assert code == 0 and took < STOP_LIMIT_S
        first.assert_nothing_left()
    finally:
        first.kill()
        second.kill()


@pytest.mark.parametrize(
    "command", [("worker", "classify"), ("api", "--orchestrator")], ids=["worker", "api"]
)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_signal_stops_a_worker_or_an_api_and_the_services_it_started(
    tmp_path: Path, command: tuple[str, ...], sig: signal.Signals
) -> None:
    """`ragbus worker` and `ragbus api` stop as `ragbus up` does, with the nats-server and
    redis-server they started themselves (no NATS or Redis at their URLs)."""
    stack = Up(tmp_path, RAGBUS_LOG_LEVEL="INFO")
    try:
        stack.start(*command)
        stack.wait_for(lambda: "runtime_started" in stack.stderr(), "runtime_started")
        code, took = stack.stop_with(sig)
        print(f"stop of ragbus {' '.join(command)} while serving, {sig.name}: {took:.2f} s")
        assert code == 0, stack.stderr()[-3000:]
        assert took < STOP_LIMIT_S
        assert "Traceback" not in stack.stderr()
        assert len(stack.seen) >= 2  # nats-server, redis-server
        stack.assert_nothing_left()
    finally:
        stack.kill()


def test_a_demo_on_a_data_directory_in_use_refuses(tmp_path: Path) -> None:
    """A second terminal's `ragbus demo` beside a running `ragbus up` of the same directory."""
    (tmp_path / "up").mkdir()
    (tmp_path / "demo").mkdir()
    first = Up(tmp_path / "up")
    demo = Up(tmp_path / "demo", RAGBUS_DATA_DIR=str(first.data_dir))
    demo.data_dir = tmp_path / "demo" / "data"  # what only the demo would make
    try:
        process = first.start()
        first.wait_for(first.has_worker_child, "a worker child")
        code = demo.start("demo", "--no-serve").wait(30)
        demo.look()
        assert code == 1
        assert sentence(demo.stderr()) == (
            f"ragbus: the data directory {first.data_dir} is in use by another ragbus process "
            f"(PID {process.pid}); stop that process, or set RAGBUS_DATA_DIR to another "
            "directory"
        )
        assert not demo.seen and not listening(demo.nats_port) and not listening(demo.api_port)
        assert process.poll() is None
    finally:
        first.kill()
        demo.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_ctrl_c_during_a_demos_start_stops_everything(up: Up, sig: signal.Signals) -> None:
    """Ctrl-C while `ragbus demo` starts its services and loads its models: it stops, with
    the services it started, and says how (128 + the signal's number)."""
    up.start("demo", "--no-serve")
    up.wait_for(lambda: len(up.look()) >= 2, "its nats-server and redis-server")
    code, took = up.stop_with(sig)
    print(f"demo stopped while starting, {sig.name}: {took:.2f} s, exit {code}")
    assert code == 128 + sig
    assert took < STOP_LIMIT_S
    assert "Traceback" not in up.stderr()
    up.assert_nothing_left()


DEMO_ANSWER_TIMEOUT_S = 400.0
"""Services, models, the sample's ingest and the question, on two busy cores."""


def spawned_children(pids: set[int]) -> list[int]:
    """Those of `pids` that multiprocessing spawned (a pool's child: `spawn_main`)."""
    found = []
    for pid in pids:
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


@pytest.mark.timeout(DEMO_ANSWER_TIMEOUT_S + 180)
def cpu_ticks(pid: int) -> int:
    """User and system time the process has had, in clock ticks (`/proc/<pid>/stat`)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def wait_until_idle(pid: int, timeout: float = 120.0) -> None:
    """Until the process has taken no CPU for a second: a pool's child waiting for its next
    call, not still working through ingestion's last passes."""
    deadline = time.monotonic() + timeout
    before = cpu_ticks(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = cpu_ticks(pid)
        if now == before:
            return
        before = now
    raise AssertionError(f"process {pid} still busy after {timeout:.0f} s")


def test_ctrl_c_after_the_demos_answer_prints_no_traceback(up: Up) -> None:
    """`make demo` answers, then serves until Ctrl-C, as it says. The terminal sends SIGINT to
    its whole foreground group, the background child that ingestion's encoder passes ran in
    (a process pool's) included: that child ignores it, the demo stops everything, and no
    `KeyboardInterrupt` traceback follows the answer (issue 54: 20 lines of one did)."""
    up.start("demo", group=True)
    up.wait_for(
        lambda: "Ctrl-C stops everything" in " ".join(up.stdout().split()),
        "the answer",
        DEMO_ANSWER_TIMEOUT_S,
    )
    children = spawned_children(up.look())
    assert children, "the background child the encoder passes ran in"
    for child in children:
        wait_until_idle(child)  # where a pool's child waits for work, Ctrl-C reached it
    started = time.monotonic()
    up.ctrl_c()
    assert up.process is not None
    code = up.process.wait(STOP_LIMIT_S + 20)
    took = time.monotonic() - started
    print(f"demo stopped by Ctrl-C after its answer: {took:.2f} s, exit {code}")
    output = up.stdout() + up.stderr()
    assert "Traceback" not in output, output[-3000:]
    assert "KeyboardInterrupt" not in output, output[-3000:]
    assert code == 0, "it answered"
    assert took < STOP_LIMIT_S
    up.assert_nothing_left()


def test_ctrl_c_while_python_imports_ends_quietly(up: Up) -> None:
    """Before anything starts (the CLI's imports take a second or two): exit 130, no
    KeyboardInterrupt traceback."""
    process = up.start()
    deadline = time.monotonic() + STOP_LIMIT_S
    while not importing_ours(process.pid) and time.monotonic() < deadline:
        time.sleep(0.005)  # a Ctrl-C before the interpreter is up is Python's own to report
    process.send_signal(signal.SIGINT)
    code = process.wait(STOP_LIMIT_S)
    assert code == 130, up.stderr()[-3000:]
    assert "Traceback" not in up.stderr()
    up.assert_nothing_left()


def test_a_killed_up_leaves_nothing_running(up: Up) -> None:
    """SIGKILL takes `ragbus up` and its lock on the data directory at once; its worker child
    and the nats-server and redis-server it started are told (their parent-death signal) and
    stop too, so no process goes on using the stores without the lock, and nothing is left
    for the person at the keyboard to find and kill."""
    process = up.start()
    up.wait_for(up.has_worker_child, "a worker child")
    up.wait_for(up.ready, "ready")
    started = up.look()
    assert len(started) >= 3, started  # the worker child, nats-server, redis-server
    process.kill()
    process.wait(10)
    deadline = time.monotonic() + STOP_LIMIT_S
    while any(alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    up.assert_nothing_left()
