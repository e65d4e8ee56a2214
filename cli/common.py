"""What every `ragbus` command module shares: the terminal consoles, the common options
(`--api`, `--token`, `--verbose`, `--out`), logging set-up and writing a report.

A command module imports this and nothing else of `cli` but the support modules
(`cli.answers`, `cli.ingest_job`); this module imports nothing of `cli`.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import structlog
import typer
from rich.console import Console

from bench.provenance import run_record
from infra.logging import configure_logging
from infra.settings import Settings

console = Console()
errors = Console(stderr=True)

DEFAULT_API = "http://127.0.0.1:8000"

ApiUrl = Annotated[str, typer.Option("--api", envvar="RAGBUS_API_URL", help="API base URL.")]
Token = Annotated[
    str | None, typer.Option("--token", envvar="RAGBUS_API_TOKEN", help="Bearer token.")
]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Show logs on the terminal.")]
OutFile = Annotated[Path | None, typer.Option("--out", "-o", help="File (default: stdout).")]

# The load benchmarks' options
Queries = Annotated[Path, typer.Option(exists=True, help="One query per line, or JSONL.")]
DEFAULT_QUERIES = Path("bench/queries.txt")
Concurrency = Annotated[int, typer.Option("--concurrency", "-c", min=1)]
Duration = Annotated[float, typer.Option("--duration", "-d", min=1, help="Seconds.")]
Warmup = Annotated[
    float, typer.Option("--warmup", "-w", min=0, help="Seconds of load not counted first.")
]


def store_namespace(value: str | None) -> str | None:
    """A `--namespace` to index into, checked before anything is published: a document's
    namespace is validated by the worker that indexes it, so a bad one would otherwise be
    dead-lettered document by document, after the job was accepted."""
    import re

    from contracts.queries import STORE_NAMESPACE_PATTERN

    if value is not None and not re.match(STORE_NAMESPACE_PATTERN, value):
        raise typer.BadParameter(
            f"{value!r} is not a namespace: lower-case letters, digits, '-' and '_', "
            "starting with a letter or digit, at most 97 characters"
        )
    return value


def server_logging(settings: Settings) -> None:
    configure_logging(settings.log_level, settings.log_json)


def interactive_logging(settings: Settings, verbose: bool) -> None:
    """Interactive commands keep the terminal for their own output; our logs go to a file."""
    if verbose:
        configure_logging(settings.log_level, json=False)
        return
    configure_logging(settings.log_level, settings.log_json)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    log_file = (settings.data_dir / "ragbus.log").open("a", encoding="utf-8")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=log_file))
    # FastStream and uvicorn attach their own terminal handlers to stdlib loggers as
    # brokers start; only the global switch keeps them quiet.
    logging.disable(logging.CRITICAL)


def save_json(report: dict[str, Any], out: Path) -> None:
    """A command's report as indented JSON, its directory made when missing, with the run it
    came from (date, machine, command, commit) under `run` for the benchmark tables."""
    out.parent.mkdir(parents=True, exist_ok=True)
    recorded = {**report, "run": report.get("run") or run_record()}
    out.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")


def write_out(text: str, out: Path | None) -> None:
    """`text` to stdout, or to `out` (its directory made when missing)."""
    if out is None:
        sys.stdout.write(text + "\n")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n", encoding="utf-8")
    errors.print(f"wrote {out}")
