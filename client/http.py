"""A small async client for the ragbus HTTP API (used by `ragbus ask`, `bench` and `demo`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NamedTuple, Self

import httpx

STREAM_TIMEOUT = httpx.Timeout(10.0, read=60.0)
"""Reads may be quiet for a while: the server pings every 15 s, so 60 s means it is gone."""
KEEPALIVE_EXPIRY_S = 2.0
"""How long an idle pooled connection is reused: well inside uvicorn's 5 s keep-alive timeout,
so the client drops a connection before the server closes it under a request. httpx's default
is the same 5 s, which races the server's timer (encode/httpx#2487)."""
POOL_LIMITS = httpx.Limits(
    max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_EXPIRY_S
)
"""httpx's default pool (100 connections, 20 kept alive) with the shorter keep-alive: a
`Limits` left unset is unbounded, not httpx's default."""


class SSEMessage(NamedTuple):
    event: str
    id: str | None
    data: dict[str, Any]


@dataclass
class ApiError(Exception):
    """A non-2xx answer, with the API's own error code and message when it sent one."""

    status: int
    code: str
    message: str
    field: str | None = None
    url: str | None = None
    """The request's URL (where the answer came from), for telling a person which server."""
    token_sent: bool = False
    """Whether the request carried a bearer token (a 401 then means a wrong one, not none)."""

    def __str__(self) -> str:
        where = f" ({self.field})" if self.field else ""
        return f"{self.status} {self.code}{where}: {self.message}"


async def _raise_for_error(response: httpx.Response) -> None:
    if response.is_success:
        return
    await response.aread()
    url: str | None = None
    token_sent = False
    try:
        url = str(response.request.url)
        token_sent = "authorization" in response.request.headers
    except RuntimeError:  # a response built without a request
        pass
    try:
        error = response.json()["error"]
        raise ApiError(
            response.status_code,
            error["code"],
            error["message"],
            error.get("field"),
            url=url,
            token_sent=token_sent,
        )
    except (ValueError, KeyError, TypeError):
        raise ApiError(
            response.status_code, "http_error", response.text[:500], url=url, token_sent=token_sent
        ) from None


async def parse_sse(lines: AsyncIterator[str]) -> AsyncIterator[SSEMessage]:
    """Server-sent events from text lines; comments (pings) are skipped, data is JSON."""
    event, event_id, data = "message", None, list[str]()
    async for line in lines:
        if not line:
            if data:
                yield SSEMessage(event, event_id, json.loads("\n".join(data)))
            event, event_id, data = "message", None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "id":
            event_id = value
        elif name == "data":
            data.append(value)
    if data:
        yield SSEMessage(event, event_id, json.loads("\n".join(data)))


FINISH_S = 1.0
"""How long a stream may take to end after its `done` (the server ends it at once)."""


async def until_done(response: httpx.Response) -> AsyncIterator[SSEMessage]:
    """A request's events until its `done`. Before giving the `done`, the rest of the stream
    is read (the server ends it right after), so the response is complete and its connection
    goes back to the pool for the next request: a response left unread is closed with its
    connection, and the next request opens a new one (a connect here, an accept there)."""
    messages = parse_sse(response.aiter_lines())
    async for message in messages:
        if message.event == "done":
            with contextlib.suppress(TimeoutError, httpx.HTTPError):
                async with asyncio.timeout(FINISH_S):
                    async for _ in messages:  # nothing more is expected: read to the end
                        pass
            yield message
            return
        yield message


def _query_body(
    query: str,
    intent: str | None,
    top_k: int | None,
    namespaces: Iterable[str] | None,
    session_id: str | None,
    mode: str | None,
    narrowed: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"query": query}
    if narrowed is not None:
        body["filter"] = dict(narrowed)
    if mode:
        body["mode"] = mode
    if intent:
        body["intent"] = intent
    if top_k:
        body["top_k"] = top_k
    if namespaces:
        body["namespaces"] = list(namespaces)
    if session_id:
        body["session_id"] = session_id
    return body


class RagbusClient:
    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            limits=POOL_LIMITS,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _json(self, method: str, url: str, **kwargs: Any) -> dict[str, Any]:
        found: dict[str, Any] = await self._answer(method, url, **kwargs)
        return found

    async def _answer(self, method: str, url: str, **kwargs: Any) -> Any:
        """The JSON an API call answers (an object, or a list), or its `ApiError`."""
        try:
            response = await self._http.request(method, url, **kwargs)
        except (httpx.RemoteProtocolError, httpx.ReadError):
            # A pooled keep-alive connection the server closed as the request went out: the
            # client reads end of file (RemoteProtocolError) or, where the server's kernel
            # answered the request with a reset, ECONNRESET (ReadError). A read is safe to
            # send once more, on a fresh connection. A write is not, and is raised.
            if method != "GET":
                raise
            response = await self._http.request(method, url, **kwargs)
        await _raise_for_error(response)
        return response.json()

    async def ready(self) -> bool:
        try:
            response = await self._http.get("/readyz")
        except httpx.TransportError:
            return False
        return response.status_code == 200

    async def submit(
        self,
        query: str,
        *,
        intent: str | None = None,
        top_k: int | None = None,
        namespaces: Iterable[str] | None = None,
        session_id: str | None = None,
        mode: str | None = None,
        idempotency_key: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """`{request_id, status_url, events_url}`. With `idempotency_key`, retrying after an
        error is safe: the same key gives the same request, never a second one. `filter`:
        only passages of documents whose metadata passes it."""
        body = _query_body(query, intent, top_k, namespaces, session_id, mode, filter)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return await self._json("POST", "/v1/queries", json=body, headers=headers)

    async def ask(
        self,
        query: str,
        *,
        intent: str | None = None,
        top_k: int | None = None,
        namespaces: Iterable[str] | None = None,
        session_id: str | None = None,
        mode: str | None = None,
        idempotency_key: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[SSEMessage]:
        """Submit and follow in one request (`POST /v1/chat`): a `submitted` message with the
        request id, then the request's events until `done`, as `stream_events` gives them (a
        client cut off resumes with `stream_events(request_id, last_event_id)`)."""
        body = _query_body(query, intent, top_k, namespaces, session_id, mode, filter)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        async with self._http.stream(
            "POST", "/v1/chat", json=body, headers=headers, timeout=STREAM_TIMEOUT
        ) as resp:
            await _raise_for_error(resp)
            async for message in until_done(resp):
                yield message

    async def status(self, request_id: str) -> dict[str, Any]:
        return await self._json("GET", f"/v1/queries/{request_id}")

    async def session(self, session_id: str) -> dict[str, Any]:
        """`{session_id, turns: [{request_id, query, standalone_query, answer, ...}]}`."""
        return await self._json("GET", f"/v1/sessions/{session_id}")

    async def forget_session(self, session_id: str) -> dict[str, Any]:
        return await self._json("DELETE", f"/v1/sessions/{session_id}")

    async def stream_events(
        self, request_id: str, last_event_id: str | int | None = None
    ) -> AsyncIterator[SSEMessage]:
        """The request's events from the start (or after `last_event_id`) until `done`."""
        headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
        url = f"/v1/queries/{request_id}/events"
        async with self._http.stream("GET", url, headers=headers, timeout=STREAM_TIMEOUT) as resp:
            await _raise_for_error(resp)
            async for message in until_done(resp):
                yield message

    async def ingest(
        self, documents: Iterable[dict[str, Any]], *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """`{job_id, accepted, duplicates, status_url}`; with `idempotency_key`, a retry of a
        submission that did land answers with the same job."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return await self._json(
            "POST", "/v1/documents", json={"documents": list(documents)}, headers=headers
        )

    async def job(self, job_id: str) -> dict[str, Any]:
        return await self._json("GET", f"/v1/ingest/{job_id}")

    # -- a tenant's users, with the tenant's own key (`/v1/users`) --

    async def users(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = await self._answer("GET", "/v1/users")
        return found

    async def create_user(self, user: str, groups: Sequence[str] = ()) -> dict[str, Any]:
        """The user, and its `api_key`: shown this once."""
        return await self._json("POST", "/v1/users", json={"user": user, "groups": list(groups)})

    async def set_user_groups(self, user: str, groups: Sequence[str]) -> dict[str, Any]:
        return await self._json("PATCH", f"/v1/users/{user}", json={"groups": list(groups)})

    async def revoke_user(self, user: str) -> dict[str, Any]:
        return await self._json("DELETE", f"/v1/users/{user}")

    async def rotate_user_key(self, user: str) -> dict[str, Any]:
        return await self._json("POST", f"/v1/users/{user}/key")

    # -- a tenant's sources kept in sync, with the tenant's own key (`/v1/sources`) --

    async def sources(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = await self._answer("GET", "/v1/sources")
        return found

    async def source(self, name: str) -> dict[str, Any]:
        """The source, with its `last_sync`."""
        return await self._json("GET", f"/v1/sources/{name}")

    async def create_source(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """`{source, job_id, status_url, events_url}`: its first sync, already queued."""
        return await self._json("POST", "/v1/sources", json=dict(spec))

    async def set_source_schedule(self, name: str, **schedule: Any) -> dict[str, Any]:
        """`every_s` (None ends the schedule) and `watch`, as given; the source as it is now."""
        return await self._json("PATCH", f"/v1/sources/{name}", json=schedule)

    async def sync_source(self, name: str) -> dict[str, Any]:
        return await self._json("POST", f"/v1/sources/{name}/sync")

    async def remove_source(self, name: str, keep_documents: bool = False) -> dict[str, Any] | None:
        """The job that deletes its documents; None when they are kept."""
        params = {"keep_documents": "true"} if keep_documents else None
        response = await self._http.delete(f"/v1/sources/{name}", params=params)
        await _raise_for_error(response)
        return None if response.status_code == 204 else dict(response.json())
