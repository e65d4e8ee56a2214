"""structlog JSON logging; `request_id` is bound per message through contextvars."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@", re.IGNORECASE)


def redact_passwords(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A URL's password in any text of a log line as `***` (`redis://:***@host:port/0`): the
    services' URLs are redacted where they are logged (`infra.runtime.services.redacted`), and
    this keeps one that is not out of the logs all the same."""
    for key, value in event.items():
        if isinstance(value, str) and "://" in value and "@" in value:
            event[key] = _URL_PASSWORD.sub(r"\1***@", value)
    return event


def configure_logging(level: str = "INFO", json: bool = True) -> None:
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        redact_passwords,
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Libraries that log through stdlib logging: keep them quiet and on stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(message)s")


if not structlog.is_configured():
    # Until a process configures its logging, a line logged (at import, say) goes to stderr,
    # never stdout: a command whose product is a document (`ragbus openapi`, `asyncapi`)
    # writes only that document to stdout.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
