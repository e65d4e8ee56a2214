"""A message being worked on tells JetStream so every half ack-wait; once it is done, nothing
more is sent, even when it ends while a beat is on its way."""

from __future__ import annotations

import asyncio

from infra.runtime.worker_runtime import Heartbeat


class SlowMessage:
    def __init__(self, answer_s: float = 0.0, fails: bool = False) -> None:
        self.beats = 0
        self.answer_s = answer_s
        self.fails = fails

    async def in_progress(self) -> None:
        self.beats += 1
        await asyncio.sleep(self.answer_s)
        if self.fails:
            raise ConnectionError("gone")


async def test_a_long_step_beats_until_it_stops() -> None:
    msg = SlowMessage()
    heartbeat = Heartbeat(msg, 0.2)  # type: ignore[arg-type]
    await asyncio.sleep(0.5)
    heartbeat.stop()
    beats = msg.beats
    assert beats == 2
    await asyncio.sleep(0.5)
    assert msg.beats == beats


async def test_a_quick_step_never_beats() -> None:
    msg = SlowMessage()
    Heartbeat(msg, 0.2).stop()  # type: ignore[arg-type]
    await asyncio.sleep(0.3)
    assert msg.beats == 0


async def test_stopping_during_a_beat_sends_no_other() -> None:
    msg = SlowMessage(answer_s=0.15)
    heartbeat = Heartbeat(msg, 0.2)  # type: ignore[arg-type]
    await asyncio.sleep(0.25)  # the first beat is waiting for its answer
    heartbeat.stop()
    await asyncio.sleep(0.5)
    assert msg.beats == 1


async def test_a_failed_beat_ends_the_beating() -> None:
    msg = SlowMessage(fails=True)
    heartbeat = Heartbeat(msg, 0.2)  # type: ignore[arg-type]
    await asyncio.sleep(0.5)
    assert msg.beats == 1
    heartbeat.stop()
