"""Tenants on a real `ragbus up` in `tenants` mode: its own nats-server with authorization and
its own redis-server, both started by `ragbus up` itself, as an operator would run it.

Tenant `beta` tries every way we know to reach tenant `acme`'s data: ids, events over SSE and
over NATS (plain and JetStream, wildcards), namespaces, documents, jobs, Idempotency-Keys, and
the work subjects. The goal is no leak at all.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import httpx
import nats
import nats.errors
import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from contracts.events import caller_events
from infra.runtime.services import free_port
from tests.up_process import ROOT, ragbus_up

pytestmark = pytest.mark.integration

ADMIN = "admin-key-for-the-tenant-suite"
SECRET = "The Zephyr project codename is BLUEFINCH and its launch site is Kestrel Point."


@dataclass
class TenantStack:
    url: str
    nats_port: int
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Path

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def nats_url(self, user: str = "", password: str = "") -> str:
        auth = f"{user}:{password}@" if user else ""
        return f"nats://{auth}127.0.0.1:{self.nats_port}"


@dataclass
class Tenant:
    name: str
    api_key: str
    nats_user: str
    nats_password: str
    inbox_prefix: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TenantStack]:
    root = tmp_path_factory.mktemp("tenants")
    nats_port, api_port = free_port(), free_port()
    env = {
        **os.environ,
        "RAGBUS_AUTH_MODE": "tenants",
        "RAGBUS_ADMIN_TOKEN": ADMIN,
        "RAGBUS_NATS_URL": f"nats://127.0.0.1:{nats_port}",
        "RAGBUS_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "RAGBUS_START_SERVICES": "true",
        "RAGBUS_DATA_DIR": str(root / "data"),
        "RAGBUS_API_PORT": str(api_port),
        "RAGBUS_LOG_LEVEL": "INFO",
        "RAGBUS_GENERATE_TIMEOUT_S": "90",
        "RAGBUS_SEARCH_TIMEOUT_S": "60",
        "RAGBUS_CLASSIFY_TIMEOUT_S": "60",
        "RAGBUS_FUSE_TIMEOUT_S": "60",
        "RAGBUS_CRITIC_TIMEOUT_S": "60",
    }
    log = root / "up.log"
    url = f"http://127.0.0.1:{api_port}"
    with ragbus_up(env, log, url) as process:
        yield TenantStack(url, nats_port, env, process, log)


def _tenant(made: dict[str, Any]) -> Tenant:
    return Tenant(
        made["tenant"],
        made["api_key"],
        made["nats_user"],
        made["nats_password"],
        made["inbox_prefix"],
    )


@pytest.fixture(scope="module")
def acme(stack: TenantStack) -> Tenant:
    """Made with the CLI, as an operator would."""
    done = stack.cli("tenant", "create", "acme", "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert set(made) >= {"tenant", "api_key", "nats_user", "nats_password"}
    return _tenant(made)


@pytest.fixture(scope="module")
def beta(stack: TenantStack) -> Tenant:
    """Made through the admin API."""
    made = httpx.post(
        f"{stack.url}/v1/admin/tenants",
        json={"tenant": "beta"},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert made.status_code == 201, made.text
    return _tenant(made.json())


def wait_job(stack: TenantStack, tenant: Tenant, job_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = httpx.get(f"{stack.url}/v1/ingest/{job_id}", headers=tenant.headers).json()
        if job["status"] in ("completed", "failed"):
            assert job["status"] == "completed", job
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not finish")


def ask(stack: TenantStack, tenant: Tenant, query: str, **fields: Any) -> dict[str, Any]:
    """Submit and wait for the request to finish; its final view."""
    body = {"query": query, **fields}
    accepted = httpx.post(f"{stack.url}/v1/queries", json=body, headers=tenant.headers)
    assert accepted.status_code == 202, accepted.text
    rid = accepted.json()["request_id"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        view = httpx.get(f"{stack.url}/v1/queries/{rid}", headers=tenant.headers).json()
        if view["status"] in ("completed", "failed", "timed_out"):
            return dict(view)
        time.sleep(0.2)
    raise AssertionError(f"request {rid} did not finish")


def cited_documents(view: dict[str, Any]) -> set[str]:
    citations = ((view.get("answer") or {}).get("citations")) or {}
    return {c["document_id"] for c in citations.values()}


@pytest.fixture(scope="module")
def acme_secret(stack: TenantStack, acme: Tenant) -> dict[str, Any]:
    """acme's secret document, indexed, and a request of acme's that found it."""
    docs = {"documents": [{"id": "secret-plan", "title": "Zephyr", "text": SECRET}]}
    docs["documents"][0]["namespace"] = "docs"
    job = httpx.post(f"{stack.url}/v1/documents", json=docs, headers=acme.headers)
    assert job.status_code == 202, job.text
    wait_job(stack, acme, job.json()["job_id"])
    view = ask(stack, acme, "What is the Zephyr project codename?", namespaces=["docs"])
    assert view["status"] == "completed", view
    assert "secret-plan" in cited_documents(view)
    return {"job_id": job.json()["job_id"], "request_id": view["request_id"]}


# -- HTTP ----------------------------------------------------------------------------------


def test_every_v1_route_needs_a_live_key(stack: TenantStack, acme: Tenant) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Bearer rbk_x"}):
        refused = httpx.post(f"{stack.url}/v1/queries", json={"query": "hi"}, headers=headers)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
    assert httpx.get(f"{stack.url}/v1/admin/tenants", headers=acme.headers).status_code == 401
    assert (
        "api_key"
        not in httpx.get(
            f"{stack.url}/v1/admin/tenants", headers={"Authorization": f"Bearer {ADMIN}"}
        ).text
    )


def test_tenant_names_are_checked(stack: TenantStack) -> None:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    for name, code in (("default", 422), ("Upper", 422), ("a.b", 422), ("x" * 40, 422)):
        made = httpx.post(f"{stack.url}/v1/admin/tenants", json={"tenant": name}, headers=admin)
        assert made.status_code == code, (name, made.text)
    again = stack.cli("tenant", "create", "default")
    assert again.returncode == 1
    assert "reserved" in again.stderr


def test_another_tenants_request_is_not_found(
    stack: TenantStack, acme: Tenant, beta: Tenant, acme_secret: dict[str, Any]
) -> None:
    rid = acme_secret["request_id"]
    missing = httpx.get(f"{stack.url}/v1/queries/no-such-request", headers=beta.headers)
    for path in (f"/v1/queries/{rid}", f"/v1/queries/{rid}/events"):
        theirs = httpx.get(f"{stack.url}{path}", headers=beta.headers)
        assert theirs.status_code == 404
        assert theirs.json()["error"]["code"] == missing.json()["error"]["code"]
        assert "BLUEFINCH" not in theirs.text
    resumed = httpx.get(
        f"{stack.url}/v1/queries/{rid}/events",
        headers={**beta.headers, "Last-Event-ID": "1"},
    )
    assert resumed.status_code == 404
    # cancelling it: 404 as well, not the 409 of a finished request, which would tell it exists
    assert httpx.delete(f"{stack.url}/v1/queries/{rid}", headers=beta.headers).status_code == 404
    assert httpx.delete(f"{stack.url}/v1/queries/{rid}", headers=acme.headers).status_code == 409
    assert httpx.get(f"{stack.url}/v1/queries/{rid}", headers=acme.headers).status_code == 200


def test_another_tenants_job_is_not_found(
    stack: TenantStack, beta: Tenant, acme_secret: dict[str, Any]
) -> None:
    for path in ("", "/events"):
        job = httpx.get(
            f"{stack.url}/v1/ingest/{acme_secret['job_id']}{path}", headers=beta.headers
        )
        assert job.status_code == 404


def test_lists_show_only_the_callers_own(
    stack: TenantStack, acme: Tenant, beta: Tenant, acme_secret: dict[str, Any]
) -> None:
    """Recent requests, namespaces and documents: acme sees its own, beta none of them, and
    acme's cookie is no key for beta's reads."""

    def read(tenant: Tenant, path: str, **params: str) -> Any:
        response = httpx.get(f"{stack.url}{path}", params=params, headers=tenant.headers)
        assert response.status_code == 200, response.text
        return response.json()

    recent = [r["request_id"] for r in read(acme, "/v1/queries")["requests"]]
    assert acme_secret["request_id"] in recent
    assert acme_secret["request_id"] not in {
        r["request_id"] for r in read(beta, "/v1/queries", limit="200")["requests"]
    }
    assert {"namespace": "docs", "documents": 1} in read(acme, "/v1/namespaces")["namespaces"]
    assert "docs" not in {n["namespace"] for n in read(beta, "/v1/namespaces")["namespaces"]}
    theirs = read(beta, "/v1/documents", namespace="docs")
    assert theirs == {"namespace": "docs", "documents": []}
    mine = read(acme, "/v1/documents", namespace="docs")
    assert [d["id"] for d in mine["documents"]] == ["secret-plan"]
    assert read(beta, "/v1/whoami") == {"tenant": "beta", "auth_mode": "tenants"}
    as_cookie = httpx.get(f"{stack.url}/v1/whoami", cookies={"ragbus_token": acme.api_key}).json()
    assert as_cookie == {"tenant": "acme", "auth_mode": "tenants"}


def test_a_namespace_is_the_tenants_own(
    stack: TenantStack, acme: Tenant, beta: Tenant, acme_secret: dict[str, Any]
) -> None:
    """beta's `docs` is not acme's `docs`: it finds nothing of acme's, whatever it asks."""
    for mode in ("retrieve", "answer"):
        view = ask(
            stack, beta, "What is the Zephyr project codename?", namespaces=["docs"], mode=mode
        )
        assert "secret-plan" not in cited_documents(view)
        assert "BLUEFINCH" not in json.dumps(view)
    # and it cannot name acme's namespace as the stores know it
    refused = httpx.post(
        f"{stack.url}/v1/queries",
        json={"query": "codename?", "namespaces": ["acme__docs"]},
        headers=beta.headers,
    )
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "namespaces.0"


def test_deleting_a_document_deletes_only_the_callers(
    stack: TenantStack, acme: Tenant, beta: Tenant, acme_secret: dict[str, Any]
) -> None:
    gone = httpx.delete(
        f"{stack.url}/v1/documents/secret-plan", params={"namespace": "docs"}, headers=beta.headers
    )
    assert gone.status_code == 202
    wait_job(stack, beta, gone.json()["job_id"])
    view = ask(stack, acme, "What is the Zephyr project codename?", namespaces=["docs"])
    assert "secret-plan" in cited_documents(view)


def test_idempotency_keys_are_per_tenant(stack: TenantStack, acme: Tenant, beta: Tenant) -> None:
    key = {"Idempotency-Key": "the-same-key-for-both"}
    ids = []
    for tenant, query in ((acme, "first question"), (beta, "another question")):
        made = httpx.post(
            f"{stack.url}/v1/queries",
            json={"query": query},
            headers={**tenant.headers, **key},
        )
        assert made.status_code == 202, made.text
        assert "Idempotent-Replayed" not in made.headers
        ids.append(made.json()["request_id"])
    assert ids[0] != ids[1]


def test_nats_config_prints_the_users_ragbus_up_gives_its_server(
    stack: TenantStack, acme: Tenant, beta: Tenant
) -> None:
    """For a nats-server run elsewhere: the same users and permissions as the auth.conf the
    started one reads, with bcrypt hashes only."""
    done = stack.cli("tenant", "nats-config")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout.removeprefix("authorization "))["users"]
    applied_file = Path(stack.env["RAGBUS_DATA_DIR"]) / "nats" / "auth.conf"
    applied = json.loads(applied_file.read_text().removeprefix("authorization "))["users"]
    assert [(u["user"], u["permissions"]) for u in printed] == [
        (u["user"], u["permissions"]) for u in applied
    ]
    assert {"ragbus", acme.nats_user, beta.nats_user} <= {u["user"] for u in printed}
    assert acme.nats_password not in done.stdout
    password = (Path(stack.env["RAGBUS_DATA_DIR"]) / "nats" / "service-password").read_text()
    service = next(u for u in printed if u["user"] == "ragbus")
    assert bcrypt.checkpw(password.strip().encode(), service["password"].encode())


def test_a_revoked_tenant_is_refused_over_http_and_nats(stack: TenantStack) -> None:
    made = json.loads(stack.cli("tenant", "create", "gone", "--json").stdout)
    tenant = _tenant(made)
    url = f"{stack.url}/v1/queries"
    assert httpx.post(url, json={"query": "hi"}, headers=tenant.headers).status_code == 202
    revoked = stack.cli("tenant", "revoke", "gone", "--json")
    assert revoked.returncode == 0, revoked.stderr
    assert httpx.post(url, json={"query": "hi"}, headers=tenant.headers).status_code == 401

    async def connect() -> None:
        nc = await nats.connect(
            stack.nats_url(tenant.nats_user, tenant.nats_password),
            allow_reconnect=False,
            max_reconnect_attempts=0,
        )
        await nc.close()

    def refused() -> str | None:
        try:
            asyncio.run(connect())
        except Exception as exc:
            return str(exc)
        return None

    # The NATS user goes with the next reload (about 1 s). A connection reset while the
    # server reloads says neither yes nor no: try again until the server says why it refuses.
    deadline = time.monotonic() + 10
    while "Authorization" not in (why := refused() or ""):
        assert time.monotonic() < deadline, f"the revoked NATS user is not refused: {why!r}"
        time.sleep(0.5)


def test_limits_answer_429(stack: TenantStack) -> None:
    limits = ("--rps", "0.2", "--burst", "2", "--max-documents", "1")
    made = stack.cli("tenant", "create", "small", "--json", *limits)
    tenant = _tenant(json.loads(made.stdout))
    two = {
        "documents": [
            {"id": "one", "text": "first document"},
            {"id": "two", "text": "second document"},
        ]
    }
    refused = httpx.post(f"{stack.url}/v1/documents", json=two, headers=tenant.headers)
    assert refused.status_code == 429
    assert "documents would be 2" in refused.json()["error"]["message"]
    url = f"{stack.url}/v1/queries"
    codes = [
        httpx.post(url, json={"query": "hi"}, headers=tenant.headers).status_code for _ in range(3)
    ]
    assert codes[-1] == 429, codes  # the batch above took one of the burst of 2
    limited = httpx.post(url, json={"query": "hi"}, headers=tenant.headers)
    assert limited.status_code == 429
    assert int(limited.headers["Retry-After"]) >= 1


# -- NATS ----------------------------------------------------------------------------------


async def _errors_of(connect: Any) -> tuple[Any, list[str]]:
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    nc = await connect(on_error)
    return nc, errors


async def _tenant_nats(stack: TenantStack, tenant: Tenant) -> tuple[Any, list[str]]:
    return await _errors_of(
        lambda on_error: nats.connect(
            stack.nats_url(tenant.nats_user, tenant.nats_password),
            inbox_prefix=tenant.inbox_prefix,
            error_cb=on_error,
        )
    )


async def test_the_bus_refuses_clients_without_credentials(stack: TenantStack) -> None:
    with pytest.raises(Exception, match="Authorization"):
        await nats.connect(stack.nats_url(), allow_reconnect=False, max_reconnect_attempts=0)


async def test_a_tenant_made_by_the_admin_api_connects_to_the_bus_at_once(
    stack: TenantStack,
) -> None:
    # The admin API answers once the server has reloaded its users: a SIGHUP returns before
    # the server has read them, and a first connection in between was refused.
    async with httpx.AsyncClient(base_url=stack.url) as http:
        made = await http.post(
            "/v1/admin/tenants",
            json={"tenant": "gamma"},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
    assert made.status_code == 201, made.text
    gamma = _tenant(made.json())
    nc = await nats.connect(
        stack.nats_url(gamma.nats_user, gamma.nats_password),
        inbox_prefix=gamma.inbox_prefix,
        allow_reconnect=False,
        max_reconnect_attempts=0,
    )
    await nc.close()


async def test_a_tenant_follows_its_own_events_over_nats(stack: TenantStack, beta: Tenant) -> None:
    nc, errors = await _tenant_nats(stack, beta)
    try:
        live = await nc.subscribe("rag.events.beta.>")
        await nc.flush()
        view = await asyncio.to_thread(ask, stack, beta, "What is a lock canal?")
        kinds = []
        while True:
            msg = await live.next_msg(timeout=5)
            event = json.loads(msg.data)
            assert msg.subject == f"rag.events.beta.{view['request_id']}"
            assert event["tenant"] == "beta"
            # a `phases` message carries several phase events: expanded as the API does
            kinds.extend(e["type"] for e in caller_events(event))
            if event["type"] == "done":
                break
        assert "phase" in kinds
        # and replays them from JetStream, through a consumer whose filter is its own
        js = nc.jetstream()
        replay = await js.subscribe(
            f"rag.events.beta.{view['request_id']}",
            stream="RAG_EVENTS",
            ordered_consumer=True,
            config=ConsumerConfig(name="beta-replay", deliver_policy=DeliverPolicy.ALL),
        )
        first = json.loads((await replay.next_msg(timeout=5)).data)
        assert first["request_id"] == view["request_id"]
        assert errors == []
    finally:
        await nc.close()


async def test_a_tenant_cannot_reach_another_tenants_events_over_nats(
    stack: TenantStack, beta: Tenant, acme_secret: dict[str, Any]
) -> None:
    rid = acme_secret["request_id"]
    nc, errors = await _tenant_nats(stack, beta)
    try:
        subs = [
            await nc.subscribe(subject)
            for subject in (
                "rag.events.>",
                "rag.events.acme.>",
                f"rag.events.acme.{rid}",
                "rag.events.*.>",
                ">",
                "_INBOX.>",
                "rag.dlq.>",
            )
        ]
        await nc.flush()
        await asyncio.sleep(0.5)
        assert sum("permissions violation" in e for e in errors) >= len(subs)
        # a denied JetStream API call is never answered: a second tells it from an allowed one
        # (answered in milliseconds on loopback) as well as the client's default of five
        js = nc.jetstream(timeout=1.0)
        for config in (
            ConsumerConfig(name="steal-1"),  # filtered form on acme's subject
            None,  # the unfiltered create subject
        ):
            with pytest.raises(nats.errors.TimeoutError):
                await js.subscribe(
                    f"rag.events.acme.{rid}",
                    stream="RAG_EVENTS",
                    ordered_consumer=True,
                    config=config,
                )
        # the filter in the subject must be the consumer's own: nats-server checks it
        steal = {
            "stream_name": "RAG_EVENTS",
            "config": {
                "name": "steal-2",
                "filter_subject": "rag.events.>",
                "deliver_subject": f"{beta.inbox_prefix}.steal",
                "ack_policy": "none",
                "deliver_policy": "all",
            },
        }
        answer = await nc.request(
            "$JS.API.CONSUMER.CREATE.RAG_EVENTS.steal-2.rag.events.beta.x",
            json.dumps(steal).encode(),
            timeout=3,
        )
        assert json.loads(answer.data)["error"]["err_code"] == 10131
        for api_subject in (
            "$JS.API.STREAM.MSG.GET.RAG_EVENTS",
            "$JS.API.DIRECT.GET.RAG_EVENTS",
            "$JS.API.STREAM.INFO.RAG_EVENTS",
        ):
            with pytest.raises(nats.errors.TimeoutError):
                await nc.request(api_subject, b'{"seq": 1}', timeout=1)
        for sub in subs:
            with pytest.raises(nats.errors.TimeoutError):
                await sub.next_msg(timeout=0.2)
    finally:
        await nc.close()


async def test_a_tenant_cannot_publish_work(stack: TenantStack, beta: Tenant) -> None:
    """A forged submission or tool command never reaches the streams."""
    nc, errors = await _tenant_nats(stack, beta)
    forged = {
        "request_id": "forged-by-beta",
        "tenant": "acme",
        "type": "query.submitted",
        "query": "What is the Zephyr project codename?",
    }
    try:
        for subject in ("rag.query.submitted", "rag.cmd.tool", "rag.ingest.docs.x", "rag.res.fuse"):
            await nc.publish(subject, json.dumps(forged).encode())
        await nc.flush()
        await asyncio.sleep(0.5)
        assert sum("permissions violation for publish" in e for e in errors) == 4
    finally:
        await nc.close()
    async with httpx.AsyncClient(base_url=stack.url, headers=beta.headers) as client:
        assert (await client.get("/v1/queries/forged-by-beta")).status_code == 404
