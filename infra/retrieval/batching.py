"""Coalesce concurrent calls of a batch function into fewer, larger calls.

The encoder runs one forward pass at a time. When several documents (or queries) ask for
embeddings at once, encoding them together costs less per text than one small pass each: the
model's per-pass overhead is paid once, and torch's threads get enough work to stay busy. The
batcher adds no delay when idle: a lone call runs at once, and whatever arrives while a pass
runs is taken together by the next pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

BatchFunction = Callable[[list[str]], np.ndarray]


@dataclass
class _Pending:
    texts: list[str]
    future: asyncio.Future[np.ndarray]


@dataclass
class CoalescingBatcher:
    """Runs `function` (blocking, row per text) in a worker thread over merged requests of up to
    `max_texts` texts; a request larger than that runs alone, never split across passes."""

    function: BatchFunction
    max_texts: int = 32
    _queue: list[_Pending] = field(default_factory=list)
    _runner: asyncio.Task[None] | None = None

    async def __call__(self, texts: list[str]) -> np.ndarray:
        loop = asyncio.get_running_loop()
        pending = _Pending(list(texts), loop.create_future())
        self._queue.append(pending)
        if self._runner is None or self._runner.done() or self._runner.get_loop() is not loop:
            # a new runner serves this loop; requests left by a closed loop have no one waiting
            self._queue = [item for item in self._queue if item.future.get_loop() is loop]
            self._runner = loop.create_task(self._drain())
        return await pending.future

    def _take_batch(self) -> list[_Pending]:
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
