"""`ragbus demo`: the whole system in one process, end to end, narrated step by step.

It goes through the same doors a user would: documents are published on the bus
like `ragbus ingest`, the question is asked over HTTP like `ragbus ask`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rich.console import Console

from api.ask import ask_question
from api.client import RagbusClient
from api.ingest_job import describe, ingest_and_follow
from api.launcher import WORKER_KINDS, serve
from infra.runtime.ingest_producer import load_documents
from infra.runtime.services import ensure_services
from infra.settings import Settings

READY_TIMEOUT_S = 180.0
INGEST_TIMEOUT_S = 600.0


async def _wait_until_ready(
    server: asyncio.Task[None], ready: asyncio.Event, client: RagbusClient
) -> None:
    """Until the launcher says it serves and `/readyz` agrees; fail fast if it died."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    ready_wait = asyncio.create_task(ready.wait())
    try:
        await asyncio.wait({server, ready_wait}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ready_wait.cancel()
    if server.done():
        server.result()  # surfaces the start-up error
        raise RuntimeError("the services stopped before they were ready")
    while not await client.ready():
        if server.done() or time.monotonic() > deadline:
            raise RuntimeError("the API did not become ready (see /readyz)")
        await asyncio.sleep(0.5)


async def run_demo(
    settings: Settings,
    sample_dir: Path,
    question: str,
    console: Console,
    *,
    keep_serving: bool = True,
) -> int:
    """Returns the process exit code: 0 when the question was answered. With `keep_serving`,
    the stack stays up after the answer, for the web page, until Ctrl-C (or SIGTERM)."""
    console.rule("[bold]ragbus demo")
    console.print(f"[bold]1/4[/bold] finding or starting NATS and Redis in {settings.data_dir}")
    services = await ensure_services(settings)
    settings = services.settings  # the URLs of what was actually found or started
    api_url = f"http://{settings.api_host}:{settings.api_port}"
    console.print(
        f"      NATS {settings.nats_url} · Redis {settings.redis_url}\n"
        f"      starting the API ({api_url}), the orchestrator and workers: "
        + ", ".join(WORKER_KINDS)
    )
    ready = asyncio.Event()
    status: str | None = None
    server = asyncio.create_task(
        serve(settings, api=True, orchestrator=True, workers=WORKER_KINDS, ready=ready),
        name="ragbus-demo",
    )
    try:
        async with RagbusClient(api_url, token=settings.api_token) as client:
            started = time.perf_counter()
            await _wait_until_ready(server, ready, client)
            console.print(f"      ready in {time.perf_counter() - started:.1f} s")

            documents = list(load_documents(sample_dir))
            console.print(
                f"[bold]2/4[/bold] ingesting {len(documents)} sample documents through the bus"
            )
            _, progress = await ingest_and_follow(
                settings, documents, console, timeout_s=INGEST_TIMEOUT_S
            )
            if progress is None or progress.get("status") != "completed":
                console.print(f"[red]ingestion did not complete:[/red] {progress}")
                return 1
            console.print(f"      {describe(progress)}")

            console.print(f"[bold]3/4[/bold] asking: [italic]{question}[/italic]")
            status = await ask_question(client, question, console)
            if keep_serving and status == "completed":
                console.print(
                    f"\n[bold]Open {api_url}/[/bold] to ask, upload and watch the phases; "
                    "Ctrl-C stops everything."
                )
                await asyncio.gather(server, return_exceptions=True)
    finally:
        console.print("[bold]4/4[/bold] shutting down")
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
        services.stop()
    console.rule("[bold]done")
    return 0 if status == "completed" else 1
