"""`ragbus up|api|orchestrator|worker|ping`: run the roles (the API, the saga orchestrator,
worker kinds) in this process, `up` with a supervised worker child (`launcher`), and a
healthcheck for NATS."""

from __future__ import annotations

import asyncio
from enum import StrEnum
from typing import Annotated

import typer

from cli.common import console, errors, server_logging
from infra.errors import StartupError
from infra.settings import Settings
from launcher.layout import WORKER_KINDS, embedded_layout_problem, up_layout
from launcher.processes import SIGNALS

WorkerKind = StrEnum("WorkerKind", [(kind, kind) for kind in WORKER_KINDS])  # type: ignore[misc]


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command("api")(api_command)
    app.command()(orchestrator)
    app.command()(worker)
    app.command()(ping)
    app.command("search-replica", hidden=True)(search_replica)


def _serve(
    *,
    api: bool,
    orchestrator: bool,
    workers: tuple[str, ...],
    child_workers: tuple[str, ...] = (),
) -> None:
    settings = Settings()
    server_logging(settings)
    code = asyncio.run(
        _run(
            settings,
            api=api,
            orchestrator=orchestrator,
            workers=workers,
            child_workers=child_workers,
        )
    )
    if code:
        raise typer.Exit(code)


async def _run(
    settings: Settings,
    *,
    api: bool,
    orchestrator: bool,
    workers: tuple[str, ...],
    child_workers: tuple[str, ...],
) -> int:
    """Serve until stopped; the exit code. A start that cannot work (a taken port, a service
    that does not answer, a data directory in use or unusable) is one sentence on stderr and
    exit code 1, with nothing left running."""
    from launcher.serving import serve  # the runtime: loaded by the commands that serve

    code = 1
    try:
        await serve(
            settings,
            api=api,
            orchestrator=orchestrator,
            workers=workers,
            child_workers=child_workers,
        )
        code = 0
    except StartupError as exc:
        typer.secho(f"ragbus: {exc}", fg=typer.colors.RED, err=True)
    finally:
        # after a signal, exit once everything stopped, even if a thread still loads a model
        SIGNALS.stopped(code)
    return code


def up() -> None:
    """Run the API, the orchestrator and every worker kind: on two cores or more, the API,
    saga, classifier, generation and critic here and the other workers in a child process
    (RAGBUS_UP_PROCESSES)."""
    parent, child = up_layout(Settings())
    _serve(api=True, orchestrator=True, workers=parent, child_workers=child)


def api_command(
    orchestrator: Annotated[
        bool,
        typer.Option(
            "--orchestrator",
            help="Also run a saga orchestrator here, which takes each question's first step "
            "in this process (RAGBUS_SUBMIT_IN_PROCESS), as in `ragbus up`.",
        ),
    ] = False,
) -> None:
    """Run the HTTP API (and, with --orchestrator, a saga orchestrator beside it)."""
    _serve(api=True, orchestrator=orchestrator, workers=())


def orchestrator() -> None:
    """Run the saga orchestrator only (run several for scale-out)."""
    _serve(api=False, orchestrator=True, workers=())


def worker(
    kinds: Annotated[list[WorkerKind], typer.Argument(help="The worker kinds to run.")],
) -> None:
    """Run worker kinds in this process (run several processes for scale-out)."""
    chosen = tuple(dict.fromkeys(str(k) for k in kinds))
    problem = embedded_layout_problem(Settings(), chosen)
    if problem is not None:
        typer.secho(f"ragbus: {problem}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    _serve(api=False, orchestrator=False, workers=chosen)


def search_replica(
    name: Annotated[str, typer.Argument(help="The replica's name (r0, r1, ...).")],
) -> None:
    """A search replica (started by the process that owns the embedded stores, with
    RAGBUS_SEARCH_REPLICAS): search commands answered from a copy of the stores."""
    settings = Settings()
    server_logging(settings)

    async def run() -> None:
        from launcher.replicas import run_replica

        stop = asyncio.Event()
        with SIGNALS.listen(stop.set):
            try:
                await run_replica(settings, name, stop)
            finally:
                SIGNALS.stopped(0)

    asyncio.run(run())


def ping(timeout: Annotated[float, typer.Option(help="Seconds to wait.")] = 3.0) -> None:
    """Exit 0 when NATS JetStream answers: a container healthcheck for workers."""
    import nats

    async def check() -> None:
        settings = Settings()
        nc = await nats.connect(
            settings.nats_servers,
            connect_timeout=timeout,
            allow_reconnect=False,
            user_credentials=settings.nats_credentials,
        )
        try:
            await nc.jetstream().account_info()
        finally:
            await nc.close()

    try:
        asyncio.run(asyncio.wait_for(check(), timeout))
    except Exception as exc:
        errors.print(f"NATS unreachable: {type(exc).__name__}: {exc}")
        raise typer.Exit(1) from None
    console.print("ok")
