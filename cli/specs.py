"""`ragbus openapi|asyncapi|tables`: the documents made from the code and the reports: the HTTP
API's OpenAPI document, the bus's AsyncAPI one, and the benchmark tables of the README and
`docs/benchmarks.md` read from `results/*.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from cli.common import OutFile, console, errors, write_out
from infra.settings import Settings
from launcher.layout import WORKER_KINDS


def register(app: typer.Typer) -> None:
    app.command()(openapi)
    app.command()(asyncapi)
    app.command()(tables)


def openapi(out: OutFile = None) -> None:
    """Write the HTTP API's OpenAPI document (JSON)."""
    from api.app import create_app

    write_out(json.dumps(create_app(Settings()).openapi(), indent=2), out)


def asyncapi(
    out: OutFile = None,
    yaml: Annotated[bool, typer.Option("--yaml", help="YAML instead of JSON.")] = False,
) -> None:
    """Write the bus's AsyncAPI document: every subject the orchestrator and workers use."""
    from faststream.specification import AsyncAPI

    from infra.runtime.bus import Bus, create_broker
    from infra.runtime.resources import Resources
    from launcher.runtime import build_broker

    settings = Settings()
    runtime = Resources(settings, Bus.from_settings(create_broker(settings), settings))
    build_broker(runtime, orchestrator=True, workers=WORKER_KINDS, for_schema=True)
    spec = AsyncAPI(
        runtime.bus.broker,
        title="ragbus",
        version="0.1.0",
        description="Queries, commands, results, caller events and ingestion on NATS JetStream.",
    ).to_specification()
    write_out(spec.to_yaml() if yaml else spec.to_json(), out)


ROOT = Path(".")


def tables(
    root: Annotated[Path, typer.Option(help="The checkout whose README and docs to write.")] = ROOT,
    check: Annotated[
        bool, typer.Option("--check", help="Change nothing; exit 1 when a table is stale.")
    ] = False,
) -> None:
    """Rewrite the benchmark tables (README, docs/benchmarks.md) from results/*.json: each
    benchmark's latest run, with its date, machine and command."""
    from bench.tables import rendered

    stale = []
    for path, text in rendered(root).items():
        if path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not check:
            path.write_text(text, encoding="utf-8")
    for path in stale:
        (errors if check else console).print(f"{'stale' if check else 'rewrote'} {path}")
    if check and stale:
        raise typer.Exit(1)
