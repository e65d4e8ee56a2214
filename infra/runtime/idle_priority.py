"""Run this process only on a core that nothing else wants.

Ingestion's heavy work (parsing files, OCR, the chunks' encoder passes, entity extraction,
community detection) runs in child processes so that it never competes with a query for the
GIL. It still competes for the cores. Nice alone did not stop it from slowing queries:
at nice 10 a background task keeps about a tenth of a core beside each busy query process,
and the kernel lets it finish its slice before a query that wakes takes the core back.
Under Linux's `SCHED_IDLE` policy a task runs only when no other task wants the core, and
a waking query preempts it at once. An idle machine still gives it every core, so ingestion
alone runs as fast as before (issue 46: `ragbus bench` p95 during an ingest).

Children of such a process (tesseract, for one) inherit the policy.
"""

from __future__ import annotations

import contextlib
import os


def run_when_idle(nice: int) -> bool:
    """Lower this process to `SCHED_IDLE`, and to `nice` where that policy is missing (it is
    Linux's) or refused; whether `SCHED_IDLE` took."""
    os.nice(nice)  # kept under SCHED_IDLE as well: it orders the idle tasks among themselves
    if not hasattr(os, "SCHED_IDLE"):
        return False
    with contextlib.suppress(OSError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return True
    return False
