"""The command line a sandboxed run starts: which Python it runs (`interpreter`), and how each
isolation wraps it (`build_command`: bubblewrap's read-only filesystem and unshared namespaces,
`unshare -rn`, or the bare interpreter). What the isolations mean and how one is chosen is
`workers.tool.sandbox`."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Final

from workers.tool.sandbox_procs import drops_privileges

SANDBOX_DIR: Final = "/sandbox"


SYSTEM_DIRS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
"""The host's own programs and libraries, bound read-only into every bubblewrap sandbox."""


def open_to_others(path: Path, mode: int) -> bool:
    """Whether a user with no rights of its own has `mode` (`stat.S_IXOTH` to run it,
    `stat.S_IROTH` to read it) on `path`, every directory above it searchable by others."""
    try:
        real = path.resolve()
        if not real.stat().st_mode & mode:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in real.parents)
    except OSError:
        return False


def _world_executable(path: Path) -> bool:
    return open_to_others(path, stat.S_IXOTH)


def bwrap_system(bwrap: str = "bwrap") -> list[str]:
    """bubblewrap with every namespace unshared (no network), dying with its parent, in a
    session of its own, over the host's `SYSTEM_DIRS` read-only (a top-level symlink, as
    `/bin -> usr/bin`, made the same symlink): what each sandbox adds its own binds to."""
    command = [bwrap, "--unshare-all", "--die-with-parent", "--new-session"]
    for top in SYSTEM_DIRS:
        path = Path(top)
        if path.is_symlink():
            command += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            command += ["--ro-bind", top, top]
    return command


def interpreter() -> Path:
    """The Python the sandbox runs: the worker's own base interpreter when an unprivileged
    user can execute it, else the system's `python3`."""
    own = Path(getattr(sys, "_base_executable", "") or sys.executable).resolve()
    if not drops_privileges() or _world_executable(own):
        return own
    system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if system and _world_executable(Path(system)):
        return Path(system).resolve()
    return own


def _bwrap_command(python: Path, workdir: Path) -> list[str]:
    command = bwrap_system()
    prefix = python.parent.parent
    if not str(python).startswith("/usr/"):
        command += ["--ro-bind", str(prefix), str(prefix)]
    command += [
        "--bind",
        str(workdir),
        SANDBOX_DIR,
        "--chdir",
        SANDBOX_DIR,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "HOME",
        SANDBOX_DIR,
        "--setenv",
        "TMPDIR",
        SANDBOX_DIR,
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--",
        str(python),
        "-I",
        "-B",
        "main.py",
    ]
    return command


def build_command(isolation: str, python: Path, workdir: Path) -> list[str]:
    if isolation == "bwrap":
        return _bwrap_command(python, workdir)
    if isolation == "unshare":
        return ["unshare", "-rn", "--", str(python), "-I", "-B", "main.py"]
    return [str(python), "-I", "-B", "main.py"]
