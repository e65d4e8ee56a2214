"""The `ragbus` command's entry point: it picks how metrics are kept before anything imports
`prometheus_client`, which reads the choice once, at import.

`ragbus up` runs its roles in more than one process (`launcher.processes`), and the API's
`/metrics` must still report every one of them. So `up` runs in Prometheus multiprocess
mode: each process writes its samples to files in `PROMETHEUS_MULTIPROC_DIR` (a fresh
temporary folder per run, inherited by the worker child), and `/metrics` sums them
(`api.ops`). An operator who runs the roles as separate commands sets
`PROMETHEUS_MULTIPROC_DIR` to one shared folder for all of them, as prometheus_client
documents, or scrapes each process's own API.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence

MULTIPROC_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


def prepare_metrics(args: Sequence[str]) -> None:
    """Multiprocess mode for `ragbus up`, in a folder of its own removed at exit."""
    if not args or args[0] != "up" or os.environ.get(MULTIPROC_VARIABLE):
        return
    folder = tempfile.mkdtemp(prefix="ragbus-metrics-")
    os.environ[MULTIPROC_VARIABLE] = folder
    atexit.register(shutil.rmtree, folder, ignore_errors=True)


def main() -> None:
    prepare_metrics(sys.argv[1:])
    try:
        from cli.app import main as cli_main
    except KeyboardInterrupt:  # Ctrl-C while Python imports: nothing has started yet
        sys.exit(130)
    cli_main()
