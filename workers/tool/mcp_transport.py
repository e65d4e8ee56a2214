"""What the MCP client needs around the SDK's transports: a read stream that says when the
server closed its end (`watched`: a stdio server that exits is noticed at once, not at the next
check), and one line saying why a connection failed (`reason`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.client import Transport


def reason(exc: BaseException) -> str:
    """One line saying what went wrong (the first of an exception group's)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


class EndWatch:
    """A transport's read stream that says when it ends (the server closed its output)."""

    def __init__(self, inner: Any, ended: asyncio.Event) -> None:
        self._inner = inner
        self._ended = ended

    def __getattr__(self, name: str) -> Any:  # `last_context` and the like
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._ended.set()
            raise

    def __aiter__(self) -> EndWatch:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> EndWatch:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        result: bool | None = await self._inner.__aexit__(*exc)
        return result


@asynccontextmanager
async def watched(transport: Transport, ended: asyncio.Event) -> AsyncIterator[Any]:
    async with transport as (read, write):
        yield EndWatch(read, ended), write
