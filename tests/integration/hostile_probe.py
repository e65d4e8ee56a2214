"""The hostile-files suite's probe, in a process of its own: `/healthz` and a tenant's question
every 100 ms, and the API process's RSS, each written as a JSON line as it is measured.

A process of its own, so that what the attackers' clients cost in the test's process (200
parallel downloads through httpx take a core for seconds) is never counted as the server's
latency: a probe thread there waited for the test's GIL.

    python -m tests.integration.hostile_probe URL API_KEY API_PID OUT QUESTION

Stops on SIGTERM, once the calls it has started are done.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import httpx

from tests.integration.sse import read_events

PERIOD_S = 0.1


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise LookupError("no VmRSS")


class Probe:
    def __init__(self, url: str, key: str, pid: int, out: TextIO, question: str) -> None:
        self.url, self.key, self.pid, self.out, self.question = url, key, pid, out, question
        self.stopping = asyncio.Event()

    def write(self, **record: Any) -> None:
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.stopping.set)
        pending: set[asyncio.Task[None]] = set()
        async with (
            httpx.AsyncClient(base_url=self.url, timeout=10) as health,
            httpx.AsyncClient(
                base_url=self.url, timeout=90, headers={"Authorization": f"Bearer {self.key}"}
            ) as asker,
        ):
            self.write(kind="ready", at=time.time())
            while not self.stopping.is_set():
                started = time.monotonic()
                for call in (self.health(health), self.ask(asker)):
                    task = asyncio.create_task(call)
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                self.write(kind="rss", at=time.time(), mib=rss_mib(self.pid))
                await asyncio.sleep(max(0.0, PERIOD_S - (time.monotonic() - started)))
            await asyncio.gather(*pending, return_exceptions=True)

    async def health(self, http: httpx.AsyncClient) -> None:
        at, started, error = time.time(), time.perf_counter(), ""
        try:
            response = await http.get("/healthz")
            if response.status_code != 200:
                error = str(response.status_code)
        except httpx.HTTPError as exc:
            error = repr(exc)
        ms = (time.perf_counter() - started) * 1000
        self.write(kind="healthz", at=at, ms=ms, error=error)

    async def ask(self, http: httpx.AsyncClient) -> None:
        at, started = time.time(), time.perf_counter()
        try:
            events = await read_events(
                http, "/v1/chat", method="POST", json_body={"query": self.question}
            )
            done = events[-1].data["data"] if events and events[-1].event == "done" else {}
            status = str(done.get("status", "no done event"))
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            status = repr(exc)
        seconds = time.perf_counter() - started
        self.write(kind="question", at=at, seconds=seconds, status=status)


def main() -> None:
    url, key, pid, out, question = sys.argv[1:6]
    with open(out, "a", encoding="utf-8") as stream:
        asyncio.run(Probe(url, key, int(pid), stream, question).run())


if __name__ == "__main__":
    main()
