"""Concurrent encode calls share passes, keep their own rows, and fail only together."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from infra.retrieval.batching import CoalescingBatcher


class RecordingFunction:
    """Rows are each text's length, so a caller can tell its rows from anyone else's."""

    def __init__(self, gate: threading.Event | None = None, fail_on: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.gate = gate
        self.fail_on = fail_on

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if self.gate is not None:
            self.gate.wait(timeout=5)
        if self.fail_on in texts:
            raise RuntimeError(f"cannot encode {self.fail_on}")
        return np.array([[float(len(text))] for text in texts], dtype=np.float32)


async def test_a_lone_call_runs_at_once_and_gets_its_rows() -> None:
    function = RecordingFunction()
    rows = await CoalescingBatcher(function)(["a", "bbb"])
    assert rows.tolist() == [[1.0], [3.0]]
    assert function.calls == [["a", "bbb"]]


async def test_calls_arriving_during_a_pass_share_the_next_one() -> None:
    gate = threading.Event()
    function = RecordingFunction(gate)
    batcher = CoalescingBatcher(function, max_texts=4)
    first = asyncio.create_task(batcher(["x"]))
    await asyncio.sleep(0.05)  # the first pass is running, held by the gate
    waiting = [asyncio.create_task(batcher(["y" * n, "z" * n])) for n in (2, 3, 4)]
    await asyncio.sleep(0.05)
    gate.set()
    results = await asyncio.gather(first, *waiting)
    assert [r.ravel().tolist() for r in results] == [[1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]
    # the three waiting calls (6 texts) did not fit one pass of 4: two passes, in arrival order
    assert [len(call) for call in function.calls] == [1, 4, 2]


async def test_a_failing_pass_fails_its_callers_only() -> None:
    gate = threading.Event()
    function = RecordingFunction(gate, fail_on="bad")
    batcher = CoalescingBatcher(function, max_texts=2)
    first = asyncio.create_task(batcher(["ok"]))
    await asyncio.sleep(0.05)
    doomed = asyncio.create_task(batcher(["bad", "x"]))
    later = asyncio.create_task(batcher(["fine"]))
    await asyncio.sleep(0.05)
    gate.set()
    assert (await first).tolist() == [[2.0]]
    with pytest.raises(RuntimeError, match="cannot encode bad"):
        await doomed
    assert (await later).tolist() == [[4.0]]


async def test_a_cancelled_caller_is_skipped() -> None:
    gate = threading.Event()
    function = RecordingFunction(gate)
    batcher = CoalescingBatcher(function)
    first = asyncio.create_task(batcher(["a"]))
    await asyncio.sleep(0.05)
    cancelled = asyncio.create_task(batcher(["never"]))
    kept = asyncio.create_task(batcher(["kept"]))
    await asyncio.sleep(0.01)
    cancelled.cancel()
    gate.set()
    await first
    assert (await kept).tolist() == [[4.0]]
    assert ["never"] not in function.calls and ["never", "kept"] not in function.calls
