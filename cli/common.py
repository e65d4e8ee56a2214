"""What every `ragbus` command module shares: the terminal consoles, the common options
(`--api`, `--token`, `--verbose`, `--out`), logging set-up, writing a report, and failing well:
one sentence on stderr for what could not be reached and what fixes it (`explain`, `Failure`),
a traceback only with `--verbose` or RAGBUS_VERBOSE=1.

A command module imports this and nothing else of `cli` but the support modules
(`cli.answers`, `cli.ingest_job`); this module imports nothing of `cli`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import structlog
import typer
from rich.console import Console

from bench.provenance import run_record
from infra.logging import configure_logging
from infra.settings import Settings

if TYPE_CHECKING:
    from contracts.access import DocumentAccess

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


def access_option(value: str | None) -> DocumentAccess | None:
    """An `--access` (JSON: `{"groups": [...], "users": [...]}`), checked before anything is
    sent, as `filter_option` checks a `--filter`."""
    from pydantic import ValidationError

    from contracts.access import DocumentAccess

    if value is None:
        return None
    try:
        return DocumentAccess.model_validate_json(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'access'}: {e['msg']}" for e in exc.errors()
        )
        raise typer.BadParameter(f"--access: {problems}") from None


def filter_option(value: str | None) -> dict[str, Any] | None:
    """A `--filter` (JSON), checked here so that a bad one is told before anything is sent:
    where it is wrong, as the API would say it (`contracts.filters`)."""
    import json

    from contracts.filters import FilterError, canonical

    if value is None:
        return None
    try:
        return canonical(json.loads(value))
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--filter is not JSON: {exc}") from None
    except FilterError as exc:
        raise typer.BadParameter(f"--filter: {exc}") from None


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


# Failing well: the person at the terminal gets one sentence, not a traceback.

PREFIX = "ragbus: "
VERBOSE_VARIABLE = "RAGBUS_VERBOSE"
INTERRUPTED = 130
"""The exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it."""
API_HINT = (
    "is `ragbus up` running? It serves on RAGBUS_API_PORT; point at another with --api or "
    "RAGBUS_API_URL"
)
TOKEN_HINT = (
    "pass it with --token or RAGBUS_API_TOKEN (in `tenants` mode, a key `ragbus tenant create` "
    "made)"
)


class Failure(Exception):
    """What a command could not do, as the sentence that tells the person why and what fixes
    it: `ragbus` prints it on one line of stderr and exits with `code`."""

    def __init__(self, sentence: str, code: int = 1) -> None:
        super().__init__(sentence)
        self.sentence, self.code = sentence, code


def say(sentence: str) -> None:
    """One line on stderr, unwrapped and without markup (a URL or a path stays whole)."""
    sys.stderr.write(PREFIX + " ".join(sentence.split()) + "\n")
    sys.stderr.flush()


def verbose_asked(args: Sequence[str]) -> bool:
    """`--verbose`/`-v` among a command line's options, or RAGBUS_VERBOSE set to a true value:
    then a failure shows its traceback too."""
    if os.environ.get(VERBOSE_VARIABLE, "").strip().lower() in {"1", "true", "yes", "on"}:
        return True
    options = list(args)[: list(args).index("--")] if "--" in args else list(args)
    return any(arg in ("--verbose", "-v") for arg in options)


def _redacted(url: str) -> str:
    from infra.runtime.services import redacted

    return redacted(url)


def _setting(name: str) -> str:
    """A service URL from the settings, fit to print; the default when they do not load."""
    try:
        value = str(getattr(Settings(), name))
    except Exception:  # invalid settings are another failure, told by their own message
        value = str(Settings.model_fields[name].default)
    return _redacted(value)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception, the members of a group, and what each was raised from, depth first."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                pending.append(linked)


def _http_origin(exc: BaseException) -> str:
    """`scheme://host:port` of the request an httpx error is about."""
    try:
        url = exc.request.url  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError when none is set
        return "the API URL (--api)"
    return _redacted(f"{url.scheme}://{url.netloc.decode()}")


def _api_sentence(exc: Any) -> str:
    """A non-2xx answer from the API (`client.ApiError`)."""
    where = "the API"
    path = ""
    if exc.url:
        import httpx

        url = httpx.URL(exc.url)
        where = f"the API at {_redacted(f'{url.scheme}://{url.netloc.decode()}')}"
        path = url.path
    if exc.status == 401:
        if not exc.token_sent:
            return f"{where} asks for a token and none was sent: {TOKEN_HINT}"
        return f"{where} refused the token ({exc.message}): {TOKEN_HINT}"
    if exc.status == 403:
        return f"{where} does not allow this with the token sent ({exc.message})"
    if exc.code == "http_error" and exc.status in (404, 405):
        return (
            f"what answers at {where.removeprefix('the API at ')} is not the ragbus API "
            f"({exc.status} on {path or 'its path'}): point at ragbus with --api or RAGBUS_API_URL"
        )
    return f"{where} answered {exc}"


def explain(exc: BaseException) -> str | None:
    """The sentence for a failure a person can fix (a service not reachable, a token refused,
    a `Failure` a command raised); None for one that is a bug, shown with its traceback."""
    import httpx
    import nats.errors
    import redis.exceptions

    from client import ApiError

    for cause in _causes(exc):
        if isinstance(cause, Failure):
            return cause.sentence
        if isinstance(cause, ApiError):
            return _api_sentence(cause)
        if isinstance(cause, httpx.ConnectError | httpx.ConnectTimeout):
            return f"no API answers at {_http_origin(cause)} ({API_HINT})"
        if isinstance(cause, httpx.TimeoutException | httpx.RemoteProtocolError):
            return f"the API at {_http_origin(cause)} stopped answering ({type(cause).__name__})"
        if isinstance(cause, nats.errors.NoServersError):
            return (
                f"no NATS server answers at {_setting('nats_url')} "
                "(is `ragbus up` running? Or set RAGBUS_NATS_URL)"
            )
        if isinstance(cause, nats.errors.AuthorizationError):
            return (
                f"the NATS server at {_setting('nats_url')} refused the credentials: "
                "set RAGBUS_NATS_CREDS to the .creds file of the service account"
            )
        if isinstance(cause, nats.errors.TimeoutError):
            return (
                f"the NATS server at {_setting('nats_url')} did not answer in time "
                "(is JetStream enabled, `nats-server -js`?)"
            )
        if isinstance(cause, redis.exceptions.AuthenticationError):
            return (
                f"the Redis at {_setting('redis_url')} refused the password: put the right one "
                "in RAGBUS_REDIS_URL (redis://:PASSWORD@host:port/0)"
            )
        if isinstance(cause, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
            return (
                f"no Redis answers at {_setting('redis_url')} "
                "(is `ragbus up` running? Or set RAGBUS_REDIS_URL)"
            )
    return None


def exit_code(exc: BaseException) -> int:
    for cause in _causes(exc):
        if isinstance(cause, Failure):
            return cause.code
    return 1


def check_api(api: str, token: str | None, timeout_s: float = 5.0) -> None:
    """Before a long run against the API (`eval`, `bench`): does it answer, and does it take
    the token? Raises what `explain` tells (`httpx.ConnectError`, `client.ApiError`)."""
    import httpx

    from client.http import ApiError

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = api.rstrip("/") + "/v1/whoami"
    response = httpx.get(url, headers=headers, timeout=timeout_s)
    if response.is_success:
        return
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", response.text[:200]
    raise ApiError(response.status_code, code, message, url=url, token_sent=bool(token))


T = TypeVar("T")


def call_api(api: str, token: str | None, work: Callable[[Any], Awaitable[T]]) -> T:
    """`work(client)` with a `RagbusClient` of `api`, run to its end: the commands that are
    one call over HTTP (`ragbus user`, `ragbus source`). What cannot be reached is told by
    `cli.app.main`."""
    import asyncio

    from client import RagbusClient

    async def main() -> T:
        async with RagbusClient(api, token=token) as client:
            return await work(client)

    return asyncio.run(main())
