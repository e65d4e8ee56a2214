"""A plain SSE reader for the tests (independent of the project's own client)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class SseEvent:
    event: str
    id: str | None
    data: dict[str, Any]

    @property
    def key(self) -> tuple[int, int]:
        """The id as (stream sequence, part): `<seq>`, or `<seq>.<part>` for one of several
        phase events stored in one message."""
        seq, _, part = (self.id or "0").partition(".")
        return int(seq), int(part or 0)


async def read_events(
    client: httpx.AsyncClient,
    path: str,
    last_event_id: str | int | None = None,
    *,
    method: str = "GET",
    json_body: dict[str, Any] | None = None,
    timeout: float = 90.0,
) -> list[SseEvent]:
    """Read the stream until the server closes it (it closes after `done`)."""
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    events: list[SseEvent] = []
    fields: dict[str, str] = {}
    async with client.stream(
        method, path, headers=headers, json=json_body, timeout=timeout
    ) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith(":"):
                continue
            if line == "":
                if "data" in fields:
                    events.append(
                        SseEvent(
                            event=fields.get("event", "message"),
                            id=fields.get("id") or None,
                            data=json.loads(fields["data"]),
                        )
                    )
                fields = {}
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            fields[name] = fields[name] + "\n" + value if name in fields else value
    return events


async def ask(
    http: httpx.AsyncClient, query: str, session_id: str | None, *, timeout: float = 90.0
) -> dict[str, Any]:
    """Submit, follow the events to `done`; the events and the finished view."""
    body: dict[str, Any] = {"query": query}
    if session_id:
        body["session_id"] = session_id
    accepted = await http.post("/v1/queries", json=body)
    assert accepted.status_code == 202, accepted.text
    rid = accepted.json()["request_id"]
    events = await read_events(http, f"/v1/queries/{rid}/events", timeout=timeout)
    assert [e.event for e in events].count("done") == 1
    view = (await http.get(f"/v1/queries/{rid}")).json()
    assert view["status"] == "completed", view
    return {"id": rid, "events": events, "view": view, "answer": view["answer"]}
