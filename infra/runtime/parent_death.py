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
