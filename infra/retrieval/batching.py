"""Coalesce concurrent calls of a batch function into fewer, larger calls.

The encoder runs one forward pass at a time. When several documents (or queries) ask for
embeddings at once, encoding them together costs less per text than one small pass each: the
model's per-pass overhead is paid once, and torch's threads get enough work to stay busy. The
batcher adds no delay when idle: a lone call runs at once, and whatever arrives while a pass
runs is taken together by the next pass. Items are texts (rows of an array back) or anything
else a batch function takes a list of and answers with one row per item (a list, an array).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, Self, TypeVar


class Rows(Protocol):
    """A batch function's answer: one row per item, sliced back into each caller's rows."""

    def __getitem__(self, index: slice, /) -> Self: ...


ItemT = TypeVar("ItemT")
RowsT = TypeVar("RowsT", bound=Rows)


@dataclass
class _Pending(Generic[ItemT, RowsT]):
    texts: list[ItemT]
    future: asyncio.Future[RowsT]


@dataclass
class CoalescingBatcher(Generic[ItemT, RowsT]):
    """Runs `function` (blocking, row per item) in a worker thread over merged requests of up
    to `max_texts` items; a request larger than that runs alone, never split across passes."""

    function: Callable[[list[ItemT]], RowsT]
    max_texts: int = 32
    _queue: list[_Pending[ItemT, RowsT]] = field(default_factory=list)
    _runner: asyncio.Task[None] | None = None

    async def __call__(self, texts: list[ItemT]) -> RowsT:
        loop = asyncio.get_running_loop()
        pending: _Pending[ItemT, RowsT] = _Pending(list(texts), loop.create_future())
        self._queue.append(pending)
        if self._runner is None or self._runner.done() or self._runner.get_loop() is not loop:
            # a new runner serves this loop; requests left by a closed loop have no one waiting
            self._queue = [item for item in self._queue if item.future.get_loop() is loop]
            self._runner = loop.create_task(self._drain())
        return await pending.future

    def _take_batch(self) -> list[_Pending[ItemT, RowsT]]:
        batch = [self._queue.pop(0)]
        size = len(batch[0].texts)
        while self._queue and size + len(self._queue[0].texts) <= self.max_texts:
            size += len(self._queue[0].texts)
            batch.append(self._queue.pop(0))
        return batch

    async def _drain(self) -> None:
        while self._queue:
            batch = [item for item in self._take_batch() if not item.future.done()]  # not cancelled
            if not batch:
                continue
            texts = [text for item in batch for text in item.texts]
            try:
                rows = await asyncio.to_thread(self.function, texts)
            except Exception as exc:  # every caller of this pass gets the error, the next pass runs
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(exc)
                continue
            start = 0
            for item in batch:
                end = start + len(item.texts)
                if not item.future.done():
                    item.future.set_result(rows[start:end])
                start = end
