"""The restore drill: a backup taken while questions are asked (`ragbus backup`'s
`infra.backup.run.take_backup`), the stack stopped, and the backup restored on a fresh
machine state: a new data directory, a new nats-server and redis-server on other ports. Then
the same questions get the same answers with the same citations, every conversation holds its
turns, the requests' event streams replay, and the uploaded original downloads as it was.
A damaged or partial backup, and a restore over what is there, are refused in a sentence."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest

from contracts import subjects as sj
from contracts.backup import StoresCopied
from infra.backup.manifest import DamagedBackup
from infra.backup.run import BackupError, restore_backup, take_backup
from infra.runtime.services import free_port
from infra.tenancy.accounts import connect_with_creds
from tests.integration.conftest import own_services, running, serving_api, stack_settings
from tests.integration.sse import ask, read_events
from tests.up_process import ragbus_cli, ragbus_up, tenants_env

pytestmark = pytest.mark.integration

SAMPLE = Path(__file__).resolve().parents[2] / "bench" / "sample"
QUESTIONS = [
    line.strip()
    for line in (SAMPLE.parent / "queries.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]
# fifty in all: the sample's own, then the conversations' standalone questions (about other
# corpora: answered from the nearest passages here, the same way before and after)
QUESTIONS += [
    turn["standalone"]
    for line in (SAMPLE.parent / "conversations.jsonl").read_text().splitlines()
    for turn in json.loads(line)["turns"]
][: 50 - len(QUESTIONS)]
SESSIONS = 3
ORIGINAL = b"# Toll booths\n\nThe canal's tolls are paid in advance at the Balboa office.\n"


async def _until_done(http: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    for _ in range(600):
        job: dict[str, Any] = (await http.get(f"/v1/ingest/{job_id}")).json()
        if job["status"] in ("completed", "failed"):
            return job
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish")


async def _ask(http: httpx.AsyncClient, query: str, session: str | None) -> dict[str, Any]:
    """Asked and answered: the request, its answer and its citations."""
    asked = await ask(http, query, session, timeout=120)
    answer = asked["answer"]
    return {
        "request_id": asked["id"],
        "content": answer["content"],
        "citations": sorted(
            (c["document_id"], c["chunk_id"]) for c in answer["citations"].values()
        ),
    }


async def test_a_backup_taken_under_load_restores_on_a_fresh_machine(tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    asked: dict[str, dict[str, Any]] = {}
    turns: dict[str, list[str]] = {}
    with own_services(tmp_path / "a") as settings_a:
        async with (
            running(settings_a) as runtime,
            serving_api(runtime) as url,
            httpx.AsyncClient(base_url=url, timeout=60) as http,
        ):
            documents = [
                {"id": p.stem, "title": p.stem, "text": p.read_text()}
                for p in sorted(SAMPLE.glob("*.md"))
            ]
            seeded = await http.post("/v1/documents", json={"documents": documents})
            assert seeded.status_code == 202, seeded.text
            assert (await _until_done(http, seeded.json()["job_id"]))["status"] == "completed"
            uploaded = await http.post(
                "/v1/documents",
                files=[("files", ("tolls.md", ORIGINAL, "text/markdown"))],
                data={"namespace": "default"},
            )
            assert uploaded.status_code == 202, uploaded.text
            assert (await _until_done(http, uploaded.json()["job_id"]))["status"] == "completed"
            for query in QUESTIONS:
                asked[query] = await _ask(http, query, None)
            for index, query in enumerate(QUESTIONS[: SESSIONS * 2]):
                session = f"drill-{index % SESSIONS}"
                turns.setdefault(session, []).append(
                    (await _ask(http, query, session))["request_id"]
                )

            stop = asyncio.Event()
            during: list[dict[str, Any]] = []

            async def load() -> None:  # questions go on while the backup is taken
                while not stop.is_set():
                    during.append(await _ask(http, QUESTIONS[len(during) % 5], None))

            # the control request refuses what is not one, in its answer
            nc = await nats.connect(runtime.settings.nats_servers)
            try:
                for body, says in (
                    (b"not json", "malformed"),
                    (b'{"directory": "relative/dir"}', "empty directory"),
                    (b'{"directory": "/", "more": 1}', "malformed"),
                ):
                    reply = await nc.request(sj.BACKUP_STORES, body, timeout=30)
                    assert says in (StoresCopied.model_validate_json(reply.data).error or "")
            finally:
                await nc.close()

            loading = asyncio.create_task(load())
            await asyncio.sleep(0.5)
            manifest = await take_backup(runtime.settings, backup)
            stop.set()
            await loading
            assert during, "no question ran while the backup was taken"
    assert {"RAG_EVENTS", "RAG_INGEST", "OBJ_RAG_FILES"} <= set(manifest.streams)
    parts = {f.part for f in manifest.files}
    assert {"jetstream", "redis", "vectors", "graph", "memory"} <= parts

    # a damaged copy of it is refused, naming the file
    damaged = tmp_path / "damaged"
    shutil.copytree(backup, damaged)
    rdb = damaged / "redis" / "dump.rdb"
    rdb.write_bytes(rdb.read_bytes()[:-1] + b"\x00")
    fresh = stack_settings(
        f"nats://127.0.0.1:{free_port()}",
        f"redis://127.0.0.1:{free_port()}/0",
        tmp_path / "b",
        start_services=True,
    )
    with pytest.raises(DamagedBackup, match=r"redis/dump\.rdb"):
        await restore_backup(fresh, damaged)
    assert not (tmp_path / "b" / "vectors").exists()  # nothing of it was restored

    await restore_backup(fresh, backup)
    with pytest.raises(BackupError, match=r"not empty.*--replace"):
        await restore_backup(fresh, backup)

    async with (
        running(fresh) as runtime,
        serving_api(runtime) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as http,
    ):
        # the same answers, with the same citations
        for query, before in asked.items():
            after = await _ask(http, query, None)
            assert (after["content"], after["citations"]) == (
                before["content"],
                before["citations"],
            ), query
        # every conversation's turns
        for session, request_ids in turns.items():
            view = (await http.get(f"/v1/sessions/{session}")).json()
            assert [t["request_id"] for t in view["turns"]] == request_ids
        # the events replay
        for before in list(asked.values())[:3]:
            events = await read_events(
                http, f"/v1/queries/{before['request_id']}/events", timeout=30
            )
            assert [e.event for e in events][-2:] == ["answer", "done"]
        # the original, as it was uploaded
        original = await http.get("/v1/documents/tolls.md", params={"namespace": "default"})
        assert original.status_code == 200 and original.content == ORIGINAL


ADMIN = "admin-key-of-the-restore-drill-0123456789abcdef"


def _ask_as(url: str, key: str, query: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    accepted = httpx.post(f"{url}/v1/queries", json={"query": query}, headers=headers)
    assert accepted.status_code == 202, accepted.text
    request_id = accepted.json()["request_id"]
    for _ in range(600):
        view = httpx.get(f"{url}/v1/queries/{request_id}", headers=headers).json()
        if view["status"] in ("completed", "failed", "timed_out", "cancelled"):
            break
        time.sleep(0.2)
    assert view["status"] == "completed", view
    return {
        "content": view["answer"]["content"],
        "citations": sorted(c["chunk_id"] for c in view["answer"]["citations"].values()),
    }


async def _bus_batch(nats_url: str, creds: str) -> dict[str, Any]:
    nc = await connect_with_creds([nats_url], creds)
    try:
        batch = {"documents": [{"id": "after", "namespace": "bus", "text": "Restored: 42."}]}
        reply = await nc.request("rag.documents", json.dumps(batch).encode(), 10)
        return dict(json.loads(reply.data))
    finally:
        await nc.close()


def test_a_tenants_key_and_nats_account_work_after_a_restore(tmp_path: Path) -> None:
    """`tenants` mode, through `ragbus backup` and `ragbus restore` themselves: the tenant's API
    key answers the same question the same way on the restored machine, and its NATS
    credentials (signed by the operator's keys, which the backup carries) are taken by the
    new nats-server and can send a batch."""
    api_a, nats_a = free_port(), free_port()
    env_a = tenants_env(tmp_path / "a", api_a, nats_a, ADMIN, UP_PROCESSES="1")
    url_a = f"http://127.0.0.1:{api_a}"
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with ragbus_up(env_a, tmp_path / "a.log", url_a):
        made = httpx.post(f"{url_a}/v1/admin/tenants", json={"tenant": "acme"}, headers=admin)
        assert made.status_code == 201, made.text
        key = made.json()["api_key"]
        creds = httpx.post(f"{url_a}/v1/admin/tenants/acme/nats-creds", headers=admin).json()
        documents = [
            {"id": p.stem, "title": p.stem, "text": p.read_text()}
            for p in sorted(SAMPLE.glob("*.md"))[:3]
        ]
        sent = httpx.post(
            f"{url_a}/v1/documents",
            json={"documents": documents},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert sent.status_code == 202, sent.text
        for _ in range(600):
            job = httpx.get(
                f"{url_a}/v1/ingest/{sent.json()['job_id']}",
                headers={"Authorization": f"Bearer {key}"},
            ).json()
            if job["status"] == "completed":
                break
            time.sleep(0.2)
        before = _ask_as(url_a, key, QUESTIONS[0])
        backed = ragbus_cli(env_a, "backup", str(tmp_path / "backup"), timeout=300)
        assert backed.returncode == 0, backed.stderr
        assert "private keys" in backed.stderr  # the trust directory's warning

    api_b, nats_b = free_port(), free_port()
    env_b = tenants_env(tmp_path / "b", api_b, nats_b, ADMIN, UP_PROCESSES="1")
    restored = ragbus_cli(env_b, "restore", str(tmp_path / "backup"), timeout=300)
    assert restored.returncode == 0, restored.stderr
    url_b = f"http://127.0.0.1:{api_b}"
    with ragbus_up(env_b, tmp_path / "b.log", url_b):
        assert _ask_as(url_b, key, QUESTIONS[0]) == before
        answer = asyncio.run(_bus_batch(f"nats://127.0.0.1:{nats_b}", creds["nats_creds"]))
        assert answer["status"] == 202, answer
