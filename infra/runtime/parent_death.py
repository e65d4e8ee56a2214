"""A child process that stops when the process that started it dies, SIGKILLed or not.

Linux's `prctl(PR_SET_PDEATHSIG)`, set in the child between fork and exec. The signal follows
the *thread* that forked, not only the process: a child started from a pool thread that ends
would be stopped with it. So whoever passes `stop_with_parent` as a `preexec_fn` forks from a
thread that lives as long as the process (the event loop's, the main thread, or
`infra.runtime.services`' own). Elsewhere than Linux it does nothing.
"""

from __future__ import annotations

import ctypes
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
_PRCTL: Callable[[int, int], int] | None
try:  # resolved here: the child may not import between fork and exec
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _PRCTL = None


def stop_with_parent() -> None:
    """In the child, before it runs: SIGTERM when its parent (thread) dies."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


_EXEC_STOPPING_WITH_PARENT = """
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
except (OSError, AttributeError):
    pass
os.execvp(sys.argv[1], sys.argv[1:])
"""


def stopping_with_parent(command: str, args: list[str]) -> tuple[str, list[str]]:
    """The command line that runs `command args` so that it stops when the process starting
    it dies: for a child started by code that takes no `preexec_fn` (MCP's stdio transport
    starts a trusted server so). A small Python sets the signal, then becomes the command
    (`execvp`, which keeps it); the same thread rule holds: start it from a lasting thread."""
    return sys.executable, ["-I", "-S", "-c", _EXEC_STOPPING_WITH_PARENT, command, *args]
