"""A long-lived program in the sandbox: an operator's stdio MCP server that is not `trusted`.

It runs under bubblewrap, as the python tool's runs do (`workers.tool.sandbox_command`), for
as long as its connection lasts:
- every namespace unshared: no network at all (only a down loopback), its own pids, and it
  dies with the worker (`--die-with-parent`);
- a filesystem of read-only `/usr`, `/bin`, `/sbin`, `/lib*` and the directory trees of the
  program itself, nothing else of the host (no `/etc`, no `/home`, no data directory):
  - a file under a `node_modules` directory: the top-most `node_modules` (where npm hoists a
    package's dependencies);
  - a file in a virtualenv (a `pyvenv.cfg` above it): the virtualenv, and the prefix of the
    Python it was made from;
  - a file in a `bin` directory: the prefix above it (`/opt/node/bin/node`: `/opt/node`);
  - any other file: its own directory;
  the command (found on the worker's `PATH`), the interpreter its `#!` line names, each
  argument that names an existing file (made absolute: relative ones are read against the
  entry's `cwd`, else the worker's) and the directories `PYTHONPATH` and `NODE_PATH` of the
  entry's `env` name;
- a fresh temporary directory as `/sandbox` (HOME and the working directory) and `/tmp`
  (TMPDIR), both writable, removed afterwards; a private `/proc` and `/dev`;
- an environment of PATH, HOME, TMPDIR and LANG, plus the entry's `env`;
- as root, a user id of its own from the python tool's pool (`workers.tool.sandbox_procs`),
  every process of which is killed when the server stops;
- limits (set before bwrap starts, inherited by the server): RLIMIT_DATA at
  `RAGBUS_MCP_SANDBOX_MEMORY_MB` (what it may allocate, not RLIMIT_AS: Node's V8 reserves
  gigabytes of address space it never uses and dies at start under any useful RLIMIT_AS),
  RLIMIT_NOFILE 1024, RLIMIT_FSIZE 64 MB, no core files, and, with a user of its own,
  RLIMIT_NPROC 256 (it counts threads: Node runs a dozen). No CPU-time limit: a server lives
  for hours; a call's time is bounded by its timeout instead.

There is no weaker fallback: where the python tool's isolation is not bwrap (`unshare` leaves
the host's files readable), or the program's files cannot be reached by the sandbox's user,
the server is not started and `SandboxRefused` says why.

The limits and the user are applied by a few lines of Python run before bwrap
(`LAUNCHER`): the SDK's stdio transport starts the process, and it takes no `preexec_fn`.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio

from workers.tool.sandbox_command import SYSTEM_DIRS, bwrap_system, open_to_others
from workers.tool.sandbox_procs import UidPool, processes, reap_orphans

SERVER_HOME: Final = "/sandbox"
SEARCH_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
MODULE_PATHS: Final = ("PYTHONPATH", "NODE_PATH")
REAP_PAUSE_S: Final = 0.05

LAUNCHER: Final = """
import json, os, resource, sys
spec = json.loads(sys.argv[1])
uid = spec["uid"]
if uid is not None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
for name, value in spec["limits"].items():
    resource.setrlimit(getattr(resource, name), (value, value))
os.execv(sys.argv[2], sys.argv[2:])
"""


class SandboxRefused(RuntimeError):
    """The server cannot run in the sandbox here; the message says why and what to do."""


@dataclass(frozen=True)
class ServerLimits:
    data_mb: int = 1024
    open_files: int = 1024
    file_size_mb: int = 64
    max_procs: int = 256

    def rlimits(self, own_user: bool) -> dict[str, int]:
        mb = 1024 * 1024
        limits = {
            "RLIMIT_DATA": self.data_mb * mb,
            "RLIMIT_NOFILE": self.open_files,
            "RLIMIT_FSIZE": self.file_size_mb * mb,
            "RLIMIT_CORE": 0,
        }
        if own_user:  # RLIMIT_NPROC counts every process of the user: only a user of its own
            limits["RLIMIT_NPROC"] = self.max_procs
        return limits


def _system(path: Path) -> bool:
    return any(path == Path(top) or Path(top) in path.parents for top in SYSTEM_DIRS)


def _prefix_of_venv(venv: Path) -> Path | None:
    """The prefix of the Python a virtualenv was made from (`home` in its pyvenv.cfg)."""
    try:
        for line in (venv / "pyvenv.cfg").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                home = Path(value.strip())
                return home.parent if home.name == "bin" else home
    except OSError:
        return None
    return None


def _tree(path: Path) -> list[Path]:
    """The directories that hold the program `path` belongs to (see the module's rules)."""
    trees: list[Path] = []
    for candidate in dict.fromkeys([path, path.resolve()]):
        modules = [p for p in candidate.parents if p.name == "node_modules"]
        venvs = [p for p in candidate.parents if (p / "pyvenv.cfg").is_file()]
        if modules:
            trees.append(modules[-1])
        elif venvs:
            trees.append(venvs[0])
            prefix = _prefix_of_venv(venvs[0])
            if prefix is not None:
                trees.append(prefix)
        elif candidate.parent.name == "bin":
            trees.append(candidate.parent.parent)
        else:
            trees.append(candidate.parent)
    return [tree for tree in trees if not _system(tree)]


def _shebang(path: Path) -> Path | None:
    """The interpreter a script's `#!` line names by absolute path (`/usr/bin/env x`: none)."""
    try:
        with path.open("rb") as script:
            first = script.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    return Path(words[0]) if words and words[0].startswith("/") else None


def _minimal(paths: list[Path]) -> list[Path]:
    """Paths with those inside another left out, in order."""
    kept: list[Path] = []
    for path in sorted(dict.fromkeys(paths), key=lambda p: len(p.parts)):
        if not any(path == other or other in path.parents for other in kept):
            kept.append(path)
    return kept


@dataclass(frozen=True)
class ServerPlan:
    """What runs in the sandbox: the program and its arguments, and the host directories
    bound read-only for it."""

    program: list[str]
    binds: list[Path]


def plan(command: str, args: list[str], env: Mapping[str, str], cwd: str | None) -> ServerPlan:
    base = Path(cwd) if cwd else Path.cwd()
    if "/" in command:  # a path, read against the entry's working directory
        path = base / command
        found = str(path) if path.is_file() and os.access(path, os.X_OK) else None
    else:
        found = shutil.which(command, path=env.get("PATH") or os.environ.get("PATH"))
    if found is None:
        raise SandboxRefused(f"the command {command!r} was not found (or may not be run)")
    executable = Path(found).absolute()
    binds = _tree(executable)
    interpreter = _shebang(executable)
    if interpreter is not None:
        binds += _tree(interpreter)
    program = [str(executable)]
    for arg in args:
        path = Path(arg) if Path(arg).is_absolute() else base / arg
        if not arg.startswith("-") and path.is_file():
            binds += _tree(path.absolute())
            program.append(str(path.absolute()))
        else:
            program.append(arg)
    for variable in MODULE_PATHS:
        for entry in env.get(variable, "").split(os.pathsep):
            if entry and Path(entry).is_absolute() and Path(entry).is_dir():
                binds.append(Path(entry))
    return ServerPlan(program, _minimal([b for b in binds if not _system(b)]))


def bwrap_command(server: ServerPlan, workdir: Path, env: Mapping[str, str]) -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxRefused("bubblewrap (bwrap) is not installed")
    command = bwrap_system(bwrap)
    for bind in server.binds:
        command += ["--ro-bind", str(bind), str(bind)]
    command += ["--bind", str(workdir / "home"), SERVER_HOME]
    command += ["--bind", str(workdir / "tmp"), "/tmp"]
    command += ["--chdir", SERVER_HOME, "--proc", "/proc", "--dev", "/dev", "--clearenv"]
    base = {"PATH": SEARCH_PATH, "HOME": SERVER_HOME, "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
    for key, value in {**base, **env}.items():
        command += ["--setenv", key, value]
    return [*command, "--", *server.program]


@dataclass(frozen=True)
class Launch:
    """How the stdio transport starts the sandboxed server."""

    command: str
    args: list[str]
    uid: int | None


@asynccontextmanager
async def sandboxed(
    command: str,
    args: list[str],
    env: Mapping[str, str],
    cwd: str | None,
    *,
    uids: UidPool | None,
    limits: ServerLimits,
) -> AsyncIterator[Launch]:
    """The sandboxed launch of a server, valid inside the block: its temporary directory and
    (as root) its user id are the block's, and every process of that user is killed and the
    directory removed when it ends. `SandboxRefused` when it cannot run sandboxed."""
    server = plan(command, args, env, cwd)
    reap_orphans()  # what an earlier server left, if anything
    workdir = Path(tempfile.mkdtemp(prefix="ragbus-mcp-"))
    uid: int | None = None
    try:
        async with AsyncExitStack() as stack:
            uid = await stack.enter_async_context(uids.lease()) if uids is not None else None
            if uid is not None:
                unreachable = [
                    str(p)
                    for p in [Path(server.program[0]), *server.binds]
                    if not open_to_others(p, stat.S_IROTH)
                ]
                if unreachable:
                    raise SandboxRefused(
                        f"the sandbox's user cannot read {', '.join(unreachable)} (a directory "
                        "above it is not searchable by others): install the server where any "
                        "user may read it, or mark it trusted"
                    )
            for sub in ("home", "tmp"):
                (workdir / sub).mkdir(mode=0o700)
            if uid is not None:
                for path in (workdir, workdir / "home", workdir / "tmp"):
                    os.chown(path, uid, uid)
            spec = json.dumps({"uid": uid, "limits": limits.rlimits(uid is not None)})
            launcher = [sys.executable, "-I", "-S", "-c", LAUNCHER, spec]
            yield Launch(
                command=launcher[0],
                args=[*launcher[1:], *bwrap_command(server, workdir, env)],
                uid=uid,
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        with anyio.CancelScope(shield=True):  # even as the worker stops
            await _reap_sandbox_init(uid)


async def _reap_sandbox_init(uid: int | None, wait_s: float = 1.0) -> None:
    """Reap what the stopped server leaves this process: its pid namespace's init (bwrap's
    child) is handed to the worker, the subreaper, when bwrap goes, and dies a moment later
    (its user's processes were killed); unreaped, each stopped server would leave a zombie.
    Without a user of its own it cannot be told apart: reaped now, or at the next start."""
    me = os.getpid()
    for _ in range(round(wait_s / REAP_PAUSE_S)):
        reap_orphans()
        if uid is None or not any(p.ppid == me and p.uid == uid for p in processes()):
            return
        await anyio.sleep(REAP_PAUSE_S)
