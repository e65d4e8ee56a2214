"""The client's SSE parsing and the bench's arithmetic, without a server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bench.load import AskPath, Outcome, load_queries, percentile, run_one, summarize
from client import SSEMessage, parse_sse
from client import http as client_http
from client.http import ApiError, until_done


async def _lines(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


async def test_parse_sse_reads_events_and_skips_pings() -> None:
    stream = _lines(
        ": ping - 2026-01-01",
        "",
        "event: submitted",
        'data: {"request_id": "r1"}',
        "",
        "id: 7",
        "event: token",
        'data: {"type": "token",',
        'data:  "seq": 7}',
        "",
        "event: done",
        "id: 9",
        'data: {"type": "done"}',
    )
    messages = [m async for m in parse_sse(stream)]
    assert messages == [
        SSEMessage("submitted", None, {"request_id": "r1"}),
        SSEMessage("token", "7", {"type": "token", "seq": 7}),
        SSEMessage("done", "9", {"type": "done"}),
    ]


class _Stream(httpx.AsyncByteStream):
    """A response body that records whether it was read to its end and closed; with
    `hang_after`, it stops sending (without ending) after that many chunks."""

    def __init__(self, chunks: list[bytes], hang_after: int | None = None) -> None:
        self.chunks = chunks
        self.hang_after = hang_after
        self.ended = False
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for n, chunk in enumerate(self.chunks):
            if n == self.hang_after:
                await asyncio.Event().wait()
            yield chunk
        self.ended = True

    async def aclose(self) -> None:
        self.closed = True


EVENTS = [
    b'event: phase\ndata: {"type": "phase"}\n\n',
    b'event: done\ndata: {"type": "done"}\n\n',
    b": the server ends the stream here\n\n",
]


async def test_a_stream_is_read_to_its_end_before_its_done_is_given() -> None:
    """So the response is complete when its reader stops at `done`, and its connection goes
    back to the pool instead of being closed with it (a new connection a request)."""
    body = _Stream(EVENTS)
    seen = []
    async for message in until_done(httpx.Response(200, stream=body)):
        seen.append((message.event, body.ended, body.closed))
        if message.event == "done":
            break
    assert seen == [("phase", False, False), ("done", True, True)]


async def test_a_stream_that_does_not_end_after_its_done_still_gives_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_http, "FINISH_S", 0.05)
    body = _Stream(EVENTS, hang_after=2)
    messages = [m.event async for m in until_done(httpx.Response(200, stream=body))]
    assert messages == ["phase", "done"]
    assert not body.ended


def test_load_queries_reads_text_and_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "q.txt"
    path.write_text(
        '# comment\nWhat is Gatun Lake?\n\n{"query": "Who was Gorgas?"}\n{"text": "x"}\n'
    )
    assert load_queries(path) == ["What is Gatun Lake?", "Who was Gorgas?", "x"]
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(ValueError, match="no queries"):
        load_queries(empty)


def test_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile([5.0], 99) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(list(map(float, range(101))), 95) == 95.0


def test_summarize_counts_outcomes_and_phases() -> None:
    outcomes = [
        Outcome("completed", 100.0, [("fusion", 2.0), ("generation", 40.0)]),
        Outcome("completed", 300.0, [("fusion", 4.0)]),
        Outcome("failed", 50.0),
        Outcome("error", 1.0, error="ApiError: 503", http_status=503),
        Outcome("error", 1.0, error="ApiError: 429 too_many_requests", http_status=429),
        Outcome("unfinished", 60_000.0, error="no done within 60 s"),
    ]
    report = summarize(outcomes, 10.0, concurrency=2, duration_s=10)
    assert report["requests"] == 6
    assert report["errors"] == 3
    assert report["rate_limited"] == 1
    assert report["unfinished"] == 1
    assert report["throughput_qps"] == 0.2
    assert report["latency_ms"]["p50"] == 200.0
    assert report["phases"]["fusion"] == {"p50_ms": 3.0, "p95_ms": 3.9, "count": 2}
    assert report["phases"]["generation"] == {"p50_ms": 40.0, "p95_ms": 40.0, "count": 1}
    assert {"concurrency", "duration_s"} <= report.keys()


@pytest.mark.parametrize("ask", list(AskPath))
async def test_a_refused_submission_keeps_the_status_the_api_answered(ask: AskPath) -> None:
    class Refusing:
        async def submit(
            self,
            query: str,
            namespaces: list[str] | None = None,
            intent: str | None = None,
            filter: dict[str, object] | None = None,
        ) -> dict[str, str]:
            raise ApiError(429, "too_many_requests", "over 50 submissions per second")

        async def ask(
            self,
            query: str,
            namespaces: list[str] | None = None,
            intent: str | None = None,
            filter: dict[str, object] | None = None,
        ) -> AsyncIterator[SSEMessage]:
            raise ApiError(429, "too_many_requests", "over 50 submissions per second")
            yield  # an async generator, as the client's

    outcome = await run_one(Refusing(), "q", 5.0, ask=ask)  # type: ignore[arg-type]
    assert outcome.status == "error"
    assert outcome.http_status == 429
    assert outcome.error == "ApiError: 429 too_many_requests: over 50 submissions per second"


@pytest.mark.parametrize(
    "dropped",
    [
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
        httpx.ReadError("[Errno 104] Connection reset by peer"),
    ],
    ids=["closed", "reset"],
)
async def test_a_read_on_a_connection_the_server_dropped_is_sent_once_more(
    dropped: httpx.TransportError,
) -> None:
    """uvicorn may close a pooled keep-alive connection just as a request goes out (the client
    reads end of file, or a reset): a GET is sent again on a fresh one, a POST is not (it may
    have been done)."""
    from client.http import RagbusClient

    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        if len(calls) % 2:  # every first try of a request
            raise dropped
        return httpx.Response(200, json={"status": "completed"})

    async with RagbusClient("http://api", transport=httpx.MockTransport(handler)) as client:
        assert await client.status("r1") == {"status": "completed"}
        assert calls == ["GET", "GET"]
        with pytest.raises(type(dropped)):
            await client.submit("what is zinc?")
        assert calls == ["GET", "GET", "POST"]


def test_the_client_drops_an_idle_connection_before_the_server_does() -> None:
    """The pool's keep-alive expiry is shorter than the API server's (uvicorn's default, which
    the launcher keeps): an idle connection is never reused as the server closes it. The pool's
    size stays httpx's default."""
    import uvicorn
    from httpx._config import DEFAULT_LIMITS

    from client.http import KEEPALIVE_EXPIRY_S, RagbusClient

    client = RagbusClient("http://api")
    pool = client._http._transport._pool  # type: ignore[attr-defined]
    assert pool._keepalive_expiry == KEEPALIVE_EXPIRY_S
    assert pool._max_connections == DEFAULT_LIMITS.max_connections
    assert pool._max_keepalive_connections == DEFAULT_LIMITS.max_keepalive_connections
    assert uvicorn.Config(app=None).timeout_keep_alive > KEEPALIVE_EXPIRY_S
