"""`ragbus demo`: the whole system in one process, end to end, narrated step by step.

It goes through the same doors a user would: documents are published on the bus
like `ragbus ingest`, the question is asked over HTTP like `ragbus ask`. The command is
here; the run, which loads the launcher and the bus, is in `cli.demo_run`, imported when the
command runs (not for every `ragbus` command's start).
"""

from __future__ import annotations

import asyncio
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.common import Verbose, interactive_logging
from infra.settings import Settings

DEMO_QUESTION = "Why did the Americans build a lock canal, and who designed the Gatun Locks?"


def sample_dir() -> Path:
    """The bundled Panama Canal corpus (`bench/sample`, shipped as package data)."""
    return Path(str(files("bench").joinpath("sample")))


def register(app: typer.Typer) -> None:
    app.command()(demo)


def demo(
    question: Annotated[str, typer.Option(help="The question to ask.")] = DEMO_QUESTION,
    data_dir: Annotated[Path | None, typer.Option(help="Where stores and services live.")] = None,
    port: Annotated[int | None, typer.Option(help="API port.")] = None,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve/--no-serve", help="Keep serving the API and the web page afterwards."
        ),
    ] = True,
    verbose: Verbose = False,
) -> None:
    """Start everything, ingest the bundled Panama Canal corpus, ask a question; then keep
    serving the web page until Ctrl-C (`--no-serve`: stop)."""
    overrides: dict[str, Any] = {"data_dir": data_dir, "api_port": port}
    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    from cli.demo_run import StartupError, check_data_dir, main

    try:
        check_data_dir(settings.data_dir)  # before the log file goes there
    except StartupError as exc:
        typer.secho(f"ragbus: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None
    interactive_logging(settings, verbose)
    code = asyncio.run(main(settings, sample_dir(), question, keep_serving=serve))
    raise typer.Exit(code)
