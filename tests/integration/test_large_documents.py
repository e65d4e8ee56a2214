"""A batch with a document larger than the NATS server's max_payload is refused whole, with a
413 naming it; before, the server's 1 MB default made it a 503 after the first documents of
the batch had been queued (and indexed). Real nats-server at its stock 1 MB limit; no ingest
worker runs, so the work queue shows exactly what was queued."""

from __future__ import annotations

from pathlib import Path

import httpx
import nats
import pytest

from contracts import subjects as sj
from tests.integration.conftest import own_services, running, serving_api

pytestmark = pytest.mark.integration

STOCK_MAX_PAYLOAD = 1024 * 1024


def _doc(doc_id: str, text: str) -> dict[str, str]:
    return {"id": doc_id, "title": doc_id, "text": text}


async def test_a_document_over_max_payload_refuses_the_whole_batch(tmp_path: Path) -> None:
    with own_services(tmp_path, nats_max_payload=STOCK_MAX_PAYLOAD) as settings:
        async with (
            running(settings, orchestrator=False, workers=()) as runtime,
            serving_api(runtime) as url,
            httpx.AsyncClient(base_url=url, timeout=60) as http,
        ):
            small = [_doc("p1", "The canal opened in 1914."), _doc("p2", "Locks lift ships.")]
            batch = {"documents": [*small, _doc("p3", "lock " * 300_000)]}
            refused = await http.post("/v1/documents", json=batch)
            assert refused.status_code == 413, refused.text
            error = refused.json()["error"]
            assert error["code"] == "too_large"
            assert "'p3'" in error["message"] and f"{STOCK_MAX_PAYLOAD:,}" in error["message"]

            nc = await nats.connect(settings.nats_url)
            try:
                js = nc.jetstream()
                assert (await js.stream_info(sj.STREAM_INGEST)).state.messages == 0
                accepted = await http.post("/v1/documents", json={"documents": small})
                assert accepted.status_code == 202, accepted.text
                assert accepted.json()["accepted"] == 2
                # the two documents and the job's seal
                assert (await js.stream_info(sj.STREAM_INGEST)).state.messages == 3
            finally:
                await nc.close()
