"""A command whose worker dies while holding it, every time, is not lost: when JetStream gives
up redelivering it, the message is dead-lettered with the reason, the saga hears that the
step failed (and degrades, here), and the work queue no longer holds it.

The dying worker is a raw JetStream client that joins the worker's durable consumer (the
classify worker's delivery group; the ingest worker's pull consumer) and never acknowledges
what it receives, which is what a SIGKILLed worker looks like to the broker. The test has its
own nats-server and redis-server, so no other test's worker takes the command first.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import nats
import nats.errors
import nats.js.errors
import pytest
import redis.asyncio as aioredis

from contracts.ingest import IngestJobSealed
from infra.runtime.ingest_jobs import JobTracker
from tests.integration.conftest import own_services, running, serving_api
from tests.integration.test_dead_letter import dead_letters

pytestmark = pytest.mark.integration

MAX_DELIVER = 2
ACK_WAIT_S = 1.0
REQUEUES = 1


async def test_a_command_never_acknowledged_is_dead_lettered_and_fails_its_step(
    tmp_path: Path,
) -> None:
    with own_services(
        tmp_path,
        max_deliver=MAX_DELIVER,
        ack_wait_s=ACK_WAIT_S,
        classify_timeout_s=60.0,  # the step deadline must not be what rescues the request
        # a classify step of its own (as a question in a conversation has): the dying worker
        # holds the classify command, and the saga's degradation is plain to see
        classify_with_search=False,
    ) as settings:
        async with (
            running(settings, orchestrator=True, workers=()) as runtime,
            serving_api(runtime) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            nc = await nats.connect(settings.nats_url)
            try:
                js = nc.jetstream()
                dying_worker = await js.subscribe(
                    "rag.cmd.classify", queue="worker-classify", manual_ack=True
                )
                accepted = await http.post("/v1/queries", json={"query": "who built the canal?"})
                assert accepted.status_code == 202, accepted.text
                request_id = accepted.json()["request_id"]

                for delivery in range(1, MAX_DELIVER + 1):
                    held = await dying_worker.next_msg(timeout=10)
                    assert held.metadata.num_delivered == delivery
                    assert json.loads(held.data)["request_id"] == request_id
                    # ... and the worker dies without an ack: JetStream redelivers after ack_wait

                # A restarted worker asks for work. nats-server finds the command at its
                # delivery limit: it does not deliver it and publishes the advisory instead.
                await asyncio.sleep(ACK_WAIT_S + 0.3)
                with pytest.raises(nats.errors.TimeoutError):
                    await dying_worker.next_msg(timeout=1.5)

                (letter,) = await dead_letters(
                    settings.nats_url, "rag.dlq.rag.cmd.classify", want=1
                )
                assert letter["reason"] == "max_deliveries"
                assert letter["request_id"] == request_id
                assert letter["deliveries"] == MAX_DELIVER
                assert "worker-classify" in letter["error"]

                # The saga heard: classification degraded, the request moved on to searching.
                for _ in range(100):
                    state = (await http.get(f"/v1/queries/{request_id}")).json()
                    if state["status"] != "classifying":
                        break
                    await asyncio.sleep(0.1)
                assert state["status"] == "searching", state

                # And the work queue no longer holds the command.
                with pytest.raises(nats.js.errors.NotFoundError):
                    await js.get_last_msg("RAG_CMD", "rag.cmd.classify")
                info = await js.consumer_info("RAG_CMD", "worker-classify")
                assert info.num_pending == 0 and info.num_ack_pending == 0
            finally:
                await nc.close()


async def test_an_ingest_document_never_acknowledged_is_requeued_then_fails_in_its_job(
    tmp_path: Path,
) -> None:
    """The long chaos run lost a job this way: its documents were dead-lettered after their
    ingest process was killed on each delivery, and the job stayed `running` for ever. Now a
    document whose every delivery died is published afresh `ingest_requeues` times (a healthy
    document survives a run of kills); only then is it dead-lettered and counted failed."""
    with own_services(
        tmp_path, max_deliver=MAX_DELIVER, ack_wait_s=ACK_WAIT_S, ingest_requeues=REQUEUES
    ) as settings:
        async with (
            running(settings, orchestrator=True, workers=()) as runtime,
            serving_api(runtime) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            nc = await nats.connect(settings.nats_url)
            redis = aioredis.from_url(settings.redis_url, decode_responses=True)
            try:
                js = nc.jetstream()
                dying_worker = await js.pull_subscribe_bind("worker-ingest", "RAG_INGEST")
                docs = {"documents": [{"id": "doomed", "text": "A document nobody indexes."}]}
                accepted = await http.post("/v1/documents", json=docs)
                assert accepted.status_code == 202, accepted.text
                job_id = accepted.json()["job_id"]

                deliveries, event_ids = 0, set()
                while deliveries < MAX_DELIVER * (1 + REQUEUES):
                    (held,) = await dying_worker.fetch(1, timeout=10)
                    body = json.loads(held.data)
                    if body["type"] == "ingest.sealed":  # the seal is handled, and acked
                        seal = IngestJobSealed.model_validate_json(held.data)  # compact JSON
                        await JobTracker(redis, 600).seal(job_id, seal.expected, seal.duplicates)
                        await held.ack()
                        continue
                    deliveries += 1  # ... and the document's worker dies without an ack
                    event_ids.add(body["event_id"])
                    if deliveries == MAX_DELIVER + 1:  # the first delivery of the requeued copy
                        job = (await http.get(f"/v1/ingest/{job_id}")).json()
                        assert job["status"] == "running", job
                assert len(event_ids) == 1, "the same document message, counted once"
                await asyncio.sleep(ACK_WAIT_S + 0.3)
                with pytest.raises(nats.errors.TimeoutError):
                    await dying_worker.fetch(1, timeout=1.5)

                (letter,) = await dead_letters(
                    settings.nats_url, f"rag.dlq.rag.ingest.docs.{job_id}", want=1
                )
                assert letter["reason"] == "max_deliveries"
                for _ in range(100):
                    job = (await http.get(f"/v1/ingest/{job_id}")).json()
                    if job["status"] != "running":
                        break
                    await asyncio.sleep(0.1)
                assert job["status"] == "failed", job
                assert job["documents_failed"] == 1
                assert "delivered 2 times" in job["errors"]["doomed"]
            finally:
                await redis.aclose()
                await nc.close()
