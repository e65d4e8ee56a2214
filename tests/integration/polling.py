"""Waiting in a test for state that lands a moment after the event it follows: a turn the
memory worker records after the request's `done`, a seal published after a `parsed` event, a
stream's copy of a live message."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def until(
    check: Callable[[], Awaitable[T]],
    timeout: float = 20.0,
    *,
    satisfied: Callable[[T], object] = bool,
    interval: float = 0.1,
) -> T:
    """`check()` again every `interval` until `satisfied` holds for its value or `timeout`
    seconds have passed; the last value either way, for the test to assert on (its
    assertion then says what was missing)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if satisfied(value) or time.monotonic() > deadline:
            return value
        await asyncio.sleep(interval)
