"""`ragbus openapi|asyncapi`: the HTTP API's OpenAPI document and the bus's AsyncAPI one."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cli.common import OutFile, write_out
from infra.settings import Settings
from launcher.runtime import WORKER_KINDS


def register(app: typer.Typer) -> None:
    app.command()(openapi)
    app.command()(asyncapi)


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
    build_broker(runtime, orchestrator=True, workers=WORKER_KINDS)
    spec = AsyncAPI(
        runtime.bus.broker,
        title="ragbus",
        version="0.1.0",
        description="Queries, commands, results, caller events and ingestion on NATS JetStream.",
    ).to_specification()
    write_out(spec.to_yaml() if yaml else spec.to_json(), out)
