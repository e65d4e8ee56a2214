"""`DELETE /v1/queries/{id}` on the real broker: a running request ends `cancelled` with exactly
one `done`; a finished one answers 409, another tenant's or a missing one 404.

The stack runs the orchestrator but no worker, so the request waits at classification until it
is cancelled: nothing can finish it first."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import own_services, running, serving_api
from tests.integration.sse import read_events

pytestmark = pytest.mark.integration


async def test_a_running_request_is_cancelled_with_one_done(tmp_path: Path) -> None:
    with own_services(tmp_path) as settings:
        async with (
            running(settings, orchestrator=True, workers=()) as runtime,
            serving_api(runtime) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            accepted = await http.post("/v1/queries", json={"query": "What is Gatun Lake?"})
            rid = accepted.json()["request_id"]
            assert (await http.get(f"/v1/queries/{rid}")).json()["status"] != "cancelled"

            cancelled = await http.delete(f"/v1/queries/{rid}")
            assert cancelled.status_code == 202, cancelled.text
            assert cancelled.json()["events_url"] == f"/v1/queries/{rid}/events"

            events = await read_events(http, f"/v1/queries/{rid}/events", timeout=30)
            kinds = [e.event for e in events]
            assert kinds.count("done") == 1 and kinds[-1] == "done"
            assert events[-1].data["data"]["status"] == "cancelled"
            error = next(e for e in events if e.event == "error").data["data"]
            assert error["code"] == "cancelled"
            view = (await http.get(f"/v1/queries/{rid}")).json()
            assert (view["status"], view["error"]["code"]) == ("cancelled", "cancelled")

            again = await http.delete(f"/v1/queries/{rid}")
            assert again.status_code == 409
            assert "already finished" in again.json()["error"]["message"]
            missing = await http.delete("/v1/queries/no-such-request")
            assert missing.status_code == 404
