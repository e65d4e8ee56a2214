"""`ragbus demo`'s run (`cli.demo`): find or start NATS and Redis, serve the API, the
orchestrator and every worker in this process, ingest the sample through the bus, ask the
question over HTTP, and stop everything, a signal in any step included."""

from __future__ import annotations

import asyncio
import functools
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import typer
from rich.console import Console

from cli.answers import ask_question
from cli.common import console
from cli.ingest_job import describe, ingest_and_follow
from client import RagbusClient
from infra.errors import StartupError
from infra.runtime.data_lock import check_data_dir
from infra.runtime.ingest_producer import load_documents
from infra.runtime.services import redacted
from infra.settings import Settings
from launcher.layout import WORKER_KINDS
from launcher.processes import SIGNALS
from launcher.runtime import find_services
from launcher.serving import preflight, serve

READY_TIMEOUT_S = 180.0
INGEST_TIMEOUT_S = 600.0

__all__ = ["StartupError", "check_data_dir", "main", "run_demo"]


async def main(settings: Settings, sample_dir: Path, question: str, *, keep_serving: bool) -> int:
    code = 1
    try:
        code = await run_demo(settings, sample_dir, question, console, keep_serving=keep_serving)
    except StartupError as exc:  # a taken port, a data directory in use, no service: one line
        typer.secho(f"ragbus: {exc}", fg=typer.colors.RED, err=True)
    finally:
        SIGNALS.stopped(code)  # after a signal, exit once everything stopped
    return code


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
    the stack stays up after the answer, for the web page, until Ctrl-C (or SIGTERM).

    Before anything starts it takes the data directory's lock and binds the API's port
    (`launcher.serving.preflight`: `StartupError`); a signal in any step stops everything it
    started (exit code 128 + the signal's number, or 0 once the answer was given)."""
    console.rule("[bold]ragbus demo")
    answered: list[str] = []  # the question's status once it has one
    with preflight(settings, api=True, kinds=WORKER_KINDS) as (_, api_socket):
        ask = functools.partial(
            _ask,
            sample_dir=sample_dir,
            question=question,
            console=console,
            api_socket=api_socket,
            answered=answered,
            keep_serving=keep_serving,
        )
        steps = asyncio.create_task(_steps(settings, console, ask))
        with SIGNALS.listen(steps.cancel):
            try:
                status = await steps
            except asyncio.CancelledError:
                if not SIGNALS.received:
                    raise
                status = answered[0] if answered else "stopped"
    console.rule("[bold]done")
    if status == "completed":
        return 0
    return 128 + SIGNALS.signum if status == "stopped" and SIGNALS.signum else 1


async def _steps(
    settings: Settings, console: Console, ask: Callable[[Settings], Awaitable[str | None]]
) -> str | None:
    """The four steps: NATS and Redis found or started, then `ask`'s three with their URLs,
    and the services stopped; the question's status (None when it was not asked)."""
    console.print(f"[bold]1/4[/bold] finding or starting NATS and Redis in {settings.data_dir}")
    services = await find_services(settings)
    try:
        return await ask(services.settings)  # the URLs of what was actually found or started
    finally:
        services.stop()


async def _ask(
    settings: Settings,
    *,
    sample_dir: Path,
    question: str,
    console: Console,
    api_socket: socket.socket | None,
    answered: list[str],
    keep_serving: bool,
) -> str | None:
    api_url = f"http://{settings.api_host}:{settings.api_port}"
    console.print(
        f"      NATS {redacted(settings.nats_url)} · Redis {redacted(settings.redis_url)}\n"
        f"      starting the API ({api_url}), the orchestrator and workers: "
        + ", ".join(WORKER_KINDS)
    )
    ready = asyncio.Event()
    status: str | None = None
    server = asyncio.create_task(
        serve(
            settings,
            api=True,
            orchestrator=True,
            workers=WORKER_KINDS,
            ready=ready,
            api_socket=api_socket,
        ),
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
                return None
            console.print(f"      {describe(progress)}")

            console.print(f"[bold]3/4[/bold] asking: [italic]{question}[/italic]")
            status = await ask_question(client, question, console)
            answered.append(status or "unanswered")
            if keep_serving and status == "completed":
                console.print(
                    f"\n[bold]Open {api_url}/[/bold] to ask, upload and watch the phases; "
                    "Ctrl-C stops everything."
                )
                await asyncio.gather(server, return_exceptions=True)
    finally:
        console.print("[bold]4/4[/bold] shutting down")
        if not server.done() and not SIGNALS.received:
            server.cancel()  # after a signal it stops by itself: it listens too
        results = await asyncio.gather(server, return_exceptions=True)
    if isinstance(results[0], StartupError):
        raise results[0]
    return status
