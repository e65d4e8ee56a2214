"""Failure classes that decide what the consumer does with a message."""

from __future__ import annotations

import asyncio
import sys

from pydantic import ValidationError


class TransientError(Exception):
    """A dependency hiccup: nak with delay and try the same message again."""


class PoisonMessage(Exception):
    """The message can never be processed: dead-letter it at once."""


class StartupError(RuntimeError):
    """This process cannot start with this configuration or data; the message says what to do
    (the CLI prints it without a traceback)."""


_TRANSIENT: tuple[type[BaseException], ...] = (
    TransientError,
    ConnectionError,
    TimeoutError,
    asyncio.TimeoutError,
)


def is_transient(exc: BaseException) -> bool:
    """Worth another try: a connection or a wait failed, not the work. The Redis and NATS
    clients' errors are asked for only where those clients were loaded (no error of theirs can
    exist before): importing them here cost every `ragbus` command half a second."""
    if isinstance(exc, _TRANSIENT):
        return True
    if "redis" in sys.modules:
        import redis.exceptions

        if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
            return True
    if "nats" in sys.modules:
        import nats.errors

        transient = (
            nats.errors.TimeoutError,
            nats.errors.ConnectionClosedError,
            nats.errors.NoRespondersError,
        )
        return isinstance(exc, transient)
    return False


def describe_error(exc: BaseException) -> str:
    """An exception as one line for an error event or a dead letter."""
    if isinstance(exc, ValidationError):
        parts = [
            f"{'.'.join(str(p) for p in err['loc']) or '<body>'}: {err['msg']}"
            for err in exc.errors()[:5]
        ]
        return "invalid message: " + "; ".join(parts)
    return f"{type(exc).__name__}: {exc}"
