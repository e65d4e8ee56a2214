"""The door's count of each caller's requests at once (`api.gate.CallerGate`, issue 54): the
one past a limit is refused with 429 before the app runs, per caller, and every way a
request ends gives its place back."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from api.gate import CallerGate


class App:
    """Holds each request until `release` is set; counts the requests it ran."""

    def __init__(self, max_requests: int = 3, max_transfers: int = 1) -> None:
        settings = SimpleNamespace(
            caller_max_requests=max_requests, tenant_max_transfers=max_transfers
        )
        self.state = SimpleNamespace(settings=settings)
        self.release = asyncio.Event()
        self.ran = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.ran += 1
        await self.release.wait()
        if scope["path"] == "/fail":
            raise RuntimeError("the route failed")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def scope(app: App, path: str, key: str | None, method: str = "GET") -> dict[str, Any]:
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    return {
        "type": "http",
        "method": method,
        "path": path,
        "headers": headers,
        "app": app,
        "client": ("10.0.0.7", 5000),
    }


async def call(gate: CallerGate, request: dict[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await gate(request, receive, send)
    return sent


async def test_a_caller_past_its_limit_is_refused_at_the_door() -> None:
    app = App(max_requests=3)
    gate = CallerGate(app)
    held = [asyncio.create_task(call(gate, scope(app, "/v1/namespaces", "k1"))) for _ in range(3)]
    await asyncio.sleep(0)
    refused = await call(gate, scope(app, "/v1/namespaces", "k1"))
    assert refused[0]["status"] == 429 and app.ran == 3, "refused before the app ran"
    assert (b"retry-after", b"1") in refused[0]["headers"]
    body = json.loads(refused[1]["body"])
    assert body["error"]["code"] == "too_many_requests"
    assert "RAGBUS_CALLER_MAX_REQUESTS" in body["error"]["message"]
    other = asyncio.create_task(call(gate, scope(app, "/v1/namespaces", "k2")))
    await asyncio.sleep(0)
    assert app.ran == 4, "another caller is not held back"
    app.release.set()
    await asyncio.gather(*held, other)
    assert gate.requests == {} and gate.transfers == {}


async def test_downloads_are_counted_apart_and_failures_give_their_place_back() -> None:
    app = App(max_requests=10, max_transfers=1)
    gate = CallerGate(app)
    first = asyncio.create_task(call(gate, scope(app, "/v1/documents/a.pdf", "k1")))
    await asyncio.sleep(0)
    second = await call(gate, scope(app, "/v1/documents/b.pdf", "k1"))
    assert second[0]["status"] == 429
    assert "RAGBUS_TENANT_MAX_TRANSFERS" in json.loads(second[1]["body"])["error"]["message"]
    listing = asyncio.create_task(call(gate, scope(app, "/v1/documents", "k1")))
    await asyncio.sleep(0)
    assert app.ran == 2, "a listing is no transfer"
    failing = asyncio.create_task(call(gate, scope(app, "/fail", "k1")))
    await asyncio.sleep(0)
    app.release.set()
    await asyncio.gather(first, listing)
    with pytest.raises(RuntimeError):
        await failing
    assert gate.requests == {} and gate.transfers == {}


async def test_requests_without_a_key_are_counted_by_address_on_the_api_only() -> None:
    app = App(max_requests=1)
    gate = CallerGate(app)
    held = asyncio.create_task(call(gate, scope(app, "/v1/queries", None)))
    await asyncio.sleep(0)
    assert (await call(gate, scope(app, "/v1/queries", None)))[0]["status"] == 429
    # MCP's door: the same caller (a request not counted would be held: it times out)
    mcp = await asyncio.wait_for(call(gate, scope(app, "/mcp", None, method="POST")), 5)
    assert mcp[0]["status"] == 429
    health = asyncio.create_task(call(gate, scope(app, "/healthz", None)))
    await asyncio.sleep(0)
    assert app.ran == 2, "/healthz is never held at the door"
    app.release.set()
    await asyncio.gather(held, health)
