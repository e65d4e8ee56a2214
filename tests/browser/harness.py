"""What the browser tests share: Debian's chromium, a whole `ragbus up` on its own ports, and a
TCP proxy that kills an SSE connection mid-stream.

Nothing here downloads a browser: Playwright drives `/usr/bin/chromium` (`make setup`
installs it), and the tests skip, saying so, when it is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, ConsoleMessage, Page, Playwright, expect

from infra.runtime.services import free_port
from tests.environment import child_environment
from tests.up_process import ragbus_up

CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="Debian's chromium is not installed at /usr/bin/chromium (make setup installs it)",
)
STEP_TIMEOUTS = {
    "RAGBUS_GENERATE_TIMEOUT_S": "90",
    "RAGBUS_SEARCH_TIMEOUT_S": "60",
    "RAGBUS_CLASSIFY_TIMEOUT_S": "60",
    "RAGBUS_FUSE_TIMEOUT_S": "60",
    "RAGBUS_CRITIC_TIMEOUT_S": "60",
}
UI_TIMEOUT_MS = 60_000
expect.set_options(timeout=UI_TIMEOUT_MS)


@dataclass
class Stack:
    url: str
    headers: dict[str, str] = field(default_factory=dict)

    def ingest(self, documents: list[dict[str, Any]]) -> None:
        """Index documents through the API (not the page) and wait for the job."""
        job = httpx.post(
            f"{self.url}/v1/documents", json={"documents": documents}, headers=self.headers
        )
        assert job.status_code == 202, job.text
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            view = httpx.get(
                f"{self.url}/v1/ingest/{job.json()['job_id']}", headers=self.headers
            ).json()
            if view["status"] in ("completed", "failed"):
                assert view["status"] == "completed", view
                return
            time.sleep(0.3)
        raise AssertionError("the ingest job did not finish")

    def view(self, request_id: str) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/v1/queries/{request_id}", headers=self.headers)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def session(self, session_id: str) -> dict[str, Any] | None:
        """`GET /v1/sessions/{id}`; None when the API has no such session (404)."""
        response = httpx.get(f"{self.url}/v1/sessions/{session_id}", headers=self.headers)
        if response.status_code == 404:
            return None
        assert response.status_code == 200, response.text
        return dict(response.json())

    def events(self, request_id: str) -> list[tuple[str, str, dict[str, Any]]]:
        """The request's whole stream from the start: (id, event, data); an id is the stream
        sequence, or `<seq>.<part>` for one of several phase events stored in one message."""
        out: list[tuple[str, str, dict[str, Any]]] = []
        fields: dict[str, str] = {}
        with httpx.stream(
            "GET",
            f"{self.url}/v1/queries/{request_id}/events",
            headers=self.headers,
            timeout=60,
        ) as response:
            for line in response.iter_lines():
                if line.startswith(":"):
                    continue
                if line:
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
                    continue
                if "data" in fields:
                    out.append((fields["id"], fields["event"], json.loads(fields["data"])))
                fields = {}
        return out


@contextmanager
def running_stack(root: Path, **env: str) -> Iterator[Stack]:
    """`ragbus up` with its own nats-server and redis-server on free ports."""
    api_port = free_port()
    environment = child_environment()
    environment.update(
        {
            "RAGBUS_NATS_URL": f"nats://127.0.0.1:{free_port()}",
            "RAGBUS_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
            "RAGBUS_START_SERVICES": "true",
            "RAGBUS_DATA_DIR": str(root / "data"),
            "RAGBUS_API_PORT": str(api_port),
            "RAGBUS_LOG_LEVEL": "INFO",
            **STEP_TIMEOUTS,
            **env,
        }
    )
    url = f"http://127.0.0.1:{api_port}"
    with ragbus_up(environment, root / "up.log", url):
        yield Stack(url)


async def launch(playwright: Playwright) -> Browser:
    return await playwright.chromium.launch(
        executable_path=str(CHROMIUM),
        # root in a container: chromium's own sandbox needs user namespaces it may not have
        args=["--no-sandbox", "--disable-dev-shm-usage"],
    )


@dataclass
class PageWatch:
    """What a page said on its console and which CSP violations it reported."""

    console: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> None:
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.page_errors.append(str(exc)))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.console.append(f"{message.type}: {message.text}")


CSP_WATCH = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`);
});
"""


def plain(text: str) -> str:
    """Text as a reader sees it: Markdown's emphasis marks gone, white space collapsed."""
    return " ".join(re.sub(r"[*`]", "", text).split())


# -- the proxy that cuts a stream ------------------------------------------------------------

_REQUEST_LINE = re.compile(rb"^(GET|POST|DELETE|HEAD|PUT|PATCH|OPTIONS) (\S+) HTTP/1\.[01]\r\n")
_LAST_EVENT_ID = re.compile(rb"(?im)^last-event-id: *((\d+)(?:\.\d+)?)\r\n")
"""The whole id (group 1) and its stream sequence (group 2)."""
_QUERY_EVENTS = re.compile(r"^/v1/queries/[^/?]+/events")
_MESSAGE_END = re.compile(rb"\r?\n\r?\n")
CUT_SETTLE_S = 1.0
"""How long a cut stream stays open, silent, before it breaks: the page dispatches its events."""


class CuttingProxy:
    """Between the browser and the API. One request per connection (it asks for
    `Connection: close`), so each connection's path is known. The first query event stream
    is cut right after the end of its first message that matches `cut_after` (by default
    the `fusion` phase's: generation, the critic, the answer and `done` are still to come):
    what the API sent after it is dropped and the socket reset, mid-stream. Each resumed
    request's Last-Event-ID is recorded (its stream sequence), then moved `rewind` stream
    messages back, so the API replays
    events the page already applied and the page has to ignore them."""

    def __init__(
        self, upstream_port: int, rewind: int = 2, cut_after: bytes = rb'"phase": ?"fusion"'
    ) -> None:
        self.upstream_port = upstream_port
        self.rewind = rewind
        self.cut_after = re.compile(cut_after)
        self.armed = True
        self.cuts = 0
        self.last_event_ids: list[int] = []
        self.streams = 0  # query event stream requests, the first and every resumed one
        self.errors: list[str] = []  # the proxy's own failures: a test must not pass over them
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 5)
        if exc_type is None:
            assert not self.errors, f"the proxy failed: {self.errors}"

    def _request(self, data: bytes) -> tuple[bytes, str]:
        head = _REQUEST_LINE.match(data)
        path = head.group(2).decode() if head else ""
        data = re.sub(rb"(?im)^connection: *keep-alive\r\n", b"Connection: close\r\n", data)
        if head and _QUERY_EVENTS.match(path):
            self.streams += 1
        if head and _QUERY_EVENTS.match(path) and (resume := _LAST_EVENT_ID.search(data)):
            seq = int(resume.group(2))
            self.last_event_ids.append(seq)
            earlier = str(max(1, seq - self.rewind)).encode()  # a whole message, part or not
            data = data[: resume.start(1)] + earlier + data[resume.end(1) :]
        return data, path

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            await self._pipe(client_r, client_w)
        except Exception as error:  # recorded, and asserted on when the proxy exits
            self.errors.append(repr(error))
            client_w.transport.abort()

    async def _pipe(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        api_r, api_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        path = ""

        async def to_api() -> str:
            nonlocal path
            try:  # the whole head at once: a header split across reads would go unseen
                head = await client_r.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as short:
                head = short.partial
            head, path = self._request(head)
            api_w.write(head)
            await api_w.drain()
            while data := await client_r.read(65536):  # a body, if the request has one
                api_w.write(data)
                await api_w.drain()
            return "browser closed"

        async def to_browser() -> str:
            cutting, sent = False, b""
            while data := await api_r.read(65536):
                if self.armed and _QUERY_EVENTS.match(path):
                    self.armed, cutting = False, True
                if cutting:
                    marker = self.cut_after.search(sent + data)
                    end = _MESSAGE_END.search(sent + data, marker.end()) if marker else None
                    if end is not None:
                        # with the chunk's own CRLF when it follows, so the chunk is whole
                        stop = end.end() + (
                            2 if (sent + data)[end.end() : end.end() + 2] == b"\r\n" else 0
                        )
                        client_w.write(data[: stop - len(sent)])
                        await client_w.drain()
                        self.cuts += 1
                        return "cut"
                    sent += data
                client_w.write(data)
                await client_w.drain()
            return "api closed"

        pumps = [asyncio.create_task(to_api()), asyncio.create_task(to_browser())]
        done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pumps:
            pump.cancel()
        # let the cancelled pump leave its read: the browser's side is read again below, and a
        # StreamReader takes one reader at a time
        await asyncio.gather(*pumps, return_exceptions=True)
        ended = [
            p.result() if not p.cancelled() and p.exception() is None else "error" for p in done
        ]
        if ended == ["api closed"]:  # the whole response went through: close as the API did
            with contextlib.suppress(ConnectionError):
                client_w.close()
                await client_w.wait_closed()
        else:
            if ended == ["cut"]:
                # let the page dispatch what it was sent before the stream breaks: on a busy
                # machine (make test's two workers) Chromium once reported the break before its
                # renderer had parsed a single event, and resumed with no Last-Event-ID at all
                await asyncio.sleep(CUT_SETTLE_S)
                # end the stream mid-body with a FIN first, so the browser reads every byte that
                # was sent before it sees the stream break: a bare reset can discard bytes still
                # in its socket buffer, and then where the page resumes depends on timing
                await _half_close(client_r, client_w)
            # cut mid-stream, or a side went away: reset, drop whatever is left
            client_w.transport.abort()
        api_w.transport.abort()


async def _half_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Send FIN and wait (briefly) for the peer to close its side: by then it has read all."""
    with contextlib.suppress(ConnectionError, OSError):
        writer.write_eof()
    with contextlib.suppress(TimeoutError, ConnectionError, OSError):
        async with asyncio.timeout(5):
            while await reader.read(65536):
                pass
