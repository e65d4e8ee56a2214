"""Tenants on a real `ragbus up` in `tenants` mode: its own nats-server with authorization and
its own redis-server, both started by `ragbus up` itself, as an operator would run it.

Tenant `beta` tries every way we know to reach tenant `acme`'s data: ids, events over SSE and
over NATS (plain and JetStream, wildcards), namespaces, documents, jobs, Idempotency-Keys, and
the work subjects. The goal is no leak at all.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import nats
import nats.errors
import pytest
import redis.asyncio as aioredis
from nats.js.api import ConsumerConfig, DeliverPolicy

from contracts import subjects as sj
from contracts.events import caller_events
from contracts.replicas import ReplicaSeen, StoresVersion
from infra.runtime.redis_client import started_redis_url
from infra.runtime.services import free_port
from infra.tenancy.accounts import connect_with_creds
from tests.integration import bus_attacks
from tests.integration.polling import until
from tests.up_process import ragbus_cli, ragbus_up, tenants_env

pytestmark = pytest.mark.integration

ADMIN = "admin-key-for-the-tenant-suite-0123456789"
ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = ROOT / "tools" / "mcp" / "node_modules" / ".bin" / "mcp-server-everything"
MCP_SERVERS = {
    "mcpServers": {
        "everything": {
            "command": str(EVERYTHING),
            "args": ["stdio"],
            "routes": [{"pattern": r"^echo\s+(?P<message>.+)$", "tool": "echo"}],
        }
    }
}
SECRET = "The Zephyr project codename is BLUEFINCH and its launch site is Kestrel Point."


@dataclass
class TenantStack:
    url: str
    nats_port: int
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Path

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return ragbus_cli(self.env, *args)

    @property
    def nats_url(self) -> str:
        return f"nats://127.0.0.1:{self.nats_port}"

    @property
    def service_creds(self) -> str:
        return str(Path(self.env["RAGBUS_DATA_DIR"]) / "nats" / "trust" / "service.creds")


@dataclass
class Tenant:
    name: str
    api_key: str
    nats_account: str
    nats_creds: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TenantStack]:
    root = tmp_path_factory.mktemp("tenants")
    nats_port, api_port = free_port(), free_port()
    # the reference MCP server (tools/mcp, `make mcp-peers`), sandboxed: tenants use its
    # tools only where they are allowed (`test_a_tenant_uses_only_the_mcp_servers_...`)
    (root / "sources").mkdir()
    env = tenants_env(
        root,
        api_port,
        nats_port,
        ADMIN,
        LOG_LEVEL="INFO",
        MCP_SERVERS=json.dumps(MCP_SERVERS),
        SOURCE_ROOTS=str(root / "sources"),
        # a search replica beside the store owner: every question here may be answered from
        # its copy, through the service account's credentials (`test_a_search_replica_...`)
        SEARCH_REPLICAS="1",
        SEARCH_REPLICA_SETTLE_S="0.5",
    )
    log = root / "up.log"
    url = f"http://127.0.0.1:{api_port}"
    with ragbus_up(env, log, url) as process:
        yield TenantStack(url, nats_port, env, process, log)


def _tenant(made: dict[str, Any]) -> Tenant:
    return Tenant(made["tenant"], made["api_key"], made["nats_account"], made["nats_creds"])


@pytest.fixture(scope="module")
def acme(stack: TenantStack) -> Tenant:
    """Made with the CLI, as an operator would."""
    done = stack.cli("tenant", "create", "acme", "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert set(made) >= {"tenant", "api_key", "nats_account", "nats_creds"}
    assert made["nats_creds"].startswith("-----BEGIN NATS USER JWT-----")
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
    assert read(beta, "/v1/whoami") == {
        "tenant": "beta",
        "auth_mode": "tenants",
        "user": None,
        "groups": [],
    }
    as_cookie = httpx.get(f"{stack.url}/v1/whoami", cookies={"ragbus_token": acme.api_key}).json()
    assert as_cookie == {"tenant": "acme", "auth_mode": "tenants", "user": None, "groups": []}


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


def test_a_tenants_users_are_its_own(
    stack: TenantStack, acme: Tenant, beta: Tenant, acme_secret: dict[str, Any]
) -> None:
    """A user acme's key makes is acme's: it reads acme's documents, is no user of beta's,
    administers no one, and sees nothing of beta's; beta's key finds no such user."""
    made = httpx.post(
        f"{stack.url}/v1/users", json={"user": "ann", "groups": ["plans"]}, headers=acme.headers
    )
    assert made.status_code == 201, made.text
    ann = {"Authorization": f"Bearer {made.json()['api_key']}"}
    me = httpx.get(f"{stack.url}/v1/whoami", headers=ann).json()
    assert me == {"tenant": "acme", "auth_mode": "tenants", "user": "ann", "groups": ["plans"]}
    listed = httpx.get(f"{stack.url}/v1/documents", params={"namespace": "docs"}, headers=ann)
    assert [d["id"] for d in listed.json()["documents"]] == ["secret-plan"]  # tenant-wide
    assert httpx.get(f"{stack.url}/v1/users/ann", headers=beta.headers).status_code == 404
    assert httpx.get(f"{stack.url}/v1/users", headers=beta.headers).json() == []
    assert httpx.get(f"{stack.url}/v1/users", headers=ann).status_code == 403
    rid = acme_secret["request_id"]  # the tenant key's request: not a user's to see
    assert httpx.get(f"{stack.url}/v1/queries/{rid}", headers=ann).status_code == 404
    assert (
        httpx.get(
            f"{stack.url}/v1/documents", params={"namespace": "docs"}, headers=beta.headers
        ).json()["documents"]
        == []
    )


def test_a_tenants_sources_are_its_own(stack: TenantStack, acme: Tenant, beta: Tenant) -> None:
    """acme's source reads acme's folder into acme's namespace; beta neither sees, syncs,
    changes nor removes it, follows none of its jobs, and cannot point a source of its own at
    acme's folder (nor at the root above both); acme's users administer no source."""
    roots = Path(stack.env["RAGBUS_SOURCE_ROOTS"])
    folder = roots / "acme" / "manuals"
    folder.mkdir(parents=True)
    (folder / "winch.md").write_text("# Winch\n\nThe winch manual of acme, reference WM-4471.\n")
    (roots / "beta").mkdir()
    made = httpx.post(
        f"{stack.url}/v1/sources",
        json={"name": "manuals", "location": str(folder), "namespace": "docs"},
        headers=acme.headers,
    )
    assert made.status_code == 201, made.text
    job_id = made.json()["job_id"]
    wait_job(stack, acme, job_id)
    assert httpx.get(f"{stack.url}/v1/sources", headers=beta.headers).json() == []
    for method, path, body in (
        ("GET", "/v1/sources/manuals", None),
        ("POST", "/v1/sources/manuals/sync", None),
        ("PATCH", "/v1/sources/manuals", {"every_s": 3600}),
        ("DELETE", "/v1/sources/manuals", None),
        ("GET", f"/v1/ingest/{job_id}", None),
    ):
        answer = httpx.request(method, f"{stack.url}{path}", json=body, headers=beta.headers)
        assert answer.status_code == 404, (method, path, answer.text)
    for location in (str(folder), str(roots), str(roots / "beta" / ".." / "acme")):
        refused = httpx.post(
            f"{stack.url}/v1/sources",
            json={"name": "grab", "location": location, "namespace": "docs"},
            headers=beta.headers,
        )
        assert refused.status_code == 422, (location, refused.text)
    listed = httpx.get(
        f"{stack.url}/v1/documents", params={"namespace": "docs"}, headers=beta.headers
    )
    assert "manuals:winch.md" not in [d["id"] for d in listed.json()["documents"]]
    mine = httpx.get(
        f"{stack.url}/v1/documents", params={"namespace": "docs"}, headers=acme.headers
    )
    assert "manuals:winch.md" in [d["id"] for d in mine.json()["documents"]]
    user = httpx.post(f"{stack.url}/v1/users", json={"user": "sam"}, headers=acme.headers)
    sam = {"Authorization": f"Bearer {user.json()['api_key']}"}
    assert httpx.get(f"{stack.url}/v1/sources", headers=sam).status_code == 403
    assert httpx.post(f"{stack.url}/v1/sources/manuals/sync", headers=sam).status_code == 403


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


def test_nats_config_prints_the_operator_lines_and_no_secret(stack: TenantStack) -> None:
    """For a NATS run elsewhere: the operator, the system account and the resolver, once;
    never a seed."""
    done = stack.cli("tenant", "nats-config", "--resolver-dir", "/data/jwt")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('operator: "')
    assert "type: full" in done.stdout
    assert 'dir: "/data/jwt"' in done.stdout
    assert "resolver_preload" in done.stdout
    trust = Path(stack.env["RAGBUS_DATA_DIR"]) / "nats" / "trust"
    for seed_file in trust.glob("*.nk"):
        assert seed_file.read_text().strip() not in done.stdout
        assert seed_file.stat().st_mode & 0o077 == 0, seed_file
    assert "service.creds" in done.stderr


async def _refused(stack: TenantStack, creds: str) -> str | None:
    try:
        nc = await connect_with_creds(
            [stack.nats_url], creds, allow_reconnect=False, max_reconnect_attempts=0
        )
    except Exception as exc:
        return str(exc)
    await nc.close()
    return None


async def test_a_revoked_tenant_is_refused_over_http_and_nats(stack: TenantStack) -> None:
    made = await asyncio.to_thread(stack.cli, "tenant", "create", "gone", "--json")
    tenant = _tenant(json.loads(made.stdout))
    url = f"{stack.url}/v1/queries"
    async with httpx.AsyncClient() as http:
        accepted = await http.post(url, json={"query": "hi"}, headers=tenant.headers)
        assert accepted.status_code == 202
        connected = await connect_with_creds([stack.nats_url], tenant.nats_creds)
        revoked = await asyncio.to_thread(stack.cli, "tenant", "revoke", "gone", "--json")
        assert revoked.returncode == 0, revoked.stderr
        assert (
            await http.post(url, json={"query": "hi"}, headers=tenant.headers)
        ).status_code == 401
    # the revocation is on the server when the command returns: its connection is closed,
    # and a new one refused
    await asyncio.sleep(0.2)
    assert not connected.is_connected
    assert "Authorization" in (await _refused(stack, tenant.nats_creds) or "")


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


def _tools(stack: TenantStack, tenant: Tenant) -> set[str]:
    listed = httpx.get(f"{stack.url}/v1/tools", headers=tenant.headers)
    assert listed.status_code == 200, listed.text
    return {tool["name"] for tool in listed.json()["tools"]}


@pytest.mark.skipif(not EVERYTHING.exists(), reason="the reference MCP servers: make mcp-peers")
def test_a_tenant_uses_only_the_mcp_servers_it_is_allowed(
    stack: TenantStack, acme: Tenant, beta: Tenant
) -> None:
    """The operator's MCP server runs for everyone, and no tenant may use it until allowed:
    neither its tools listed, nor a question its route matches sent to it."""
    assert "calculator" in _tools(stack, beta)
    assert not any(name.startswith("everything__") for name in _tools(stack, beta))
    refused = ask(stack, beta, "echo beta was here")
    assert refused["status"] == "completed" and refused["intent"] != "tool", refused

    done = stack.cli("tenant", "tools", "acme", "--allow", "everything", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"tenant": "acme", "mcp_servers": ["everything"]}
    deadline = time.monotonic() + 30  # the tool worker's catalog, once its server is up
    while "everything__echo" not in _tools(stack, acme) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert "everything__echo" in _tools(stack, acme)
    assert not any(name.startswith("everything__") for name in _tools(stack, beta))
    deadline = time.monotonic() + 30  # the workers read an allowlist again within seconds
    while True:
        view = ask(stack, acme, "echo acme was here")
        if view["intent"] == "tool" or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert view["intent"] == "tool" and "acme was here" in view["answer"]["content"], view
    again = ask(stack, beta, "echo beta was here")
    assert again["intent"] != "tool"

    taken = httpx.put(
        f"{stack.url}/v1/admin/tenants/acme/mcp-servers",
        json={"servers": []},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert taken.status_code == 200 and taken.json()["mcp_servers"] == [], taken.text
    assert not any(name.startswith("everything__") for name in _tools(stack, acme))


# -- NATS: an account per tenant ----------------------------------------------------------


async def test_the_bus_refuses_clients_without_credentials(stack: TenantStack) -> None:
    with pytest.raises(Exception, match="Authorization"):
        await nats.connect(stack.nats_url, allow_reconnect=False, max_reconnect_attempts=0)


async def test_a_tenant_made_by_the_admin_api_connects_to_the_bus_at_once(
    stack: TenantStack,
) -> None:
    async with httpx.AsyncClient(base_url=stack.url) as http:
        made = await http.post(
            "/v1/admin/tenants",
            json={"tenant": "gamma"},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
    assert made.status_code == 201, made.text
    gamma = _tenant(made.json())
    nc = await connect_with_creds(
        [stack.nats_url], gamma.nats_creds, allow_reconnect=False, max_reconnect_attempts=0
    )
    try:  # its stream is there too, empty
        info = await nc.jetstream().stream_info("RAG_EVENTS")
        assert info.config.subjects == ["rag.events.gamma.>"]
    finally:
        await nc.close()


async def test_a_tenant_follows_and_replays_its_own_events_over_nats(
    stack: TenantStack, beta: Tenant
) -> None:
    nc = await connect_with_creds([stack.nats_url], beta.nats_creds)
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
        # and replays them from its own account's stream, with a consumer named as it likes
        js = nc.jetstream()
        replay = await js.subscribe(
            f"rag.events.beta.{view['request_id']}",
            stream="RAG_EVENTS",
            durable="replay",
            config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
        )
        replayed = []
        while not replayed or replayed[-1]["type"] != "done":
            msg = await replay.next_msg(timeout=5)
            await msg.ack()
            replayed.append(json.loads(msg.data))
        assert [e["type"] for e in replayed if e["type"] != "phases"][-1] == "done"
        assert {e["request_id"] for e in replayed} == {view["request_id"]}
    finally:
        await nc.close()


async def test_a_tenant_feeds_documents_over_the_bus(stack: TenantStack, beta: Tenant) -> None:
    """A batch sent to `rag.documents` from the tenant's account is a job of its own, checked
    and answered as `POST /v1/documents` is; a retry with the same Idempotency-Key replays."""
    nc = await connect_with_creds([stack.nats_url], beta.nats_creds)
    batch = {"documents": [{"id": "bus-note", "namespace": "bus", "text": "Over the bus: 42."}]}
    try:
        key = {"Idempotency-Key": "bus-batch-1"}
        answer = json.loads(
            (await nc.request("rag.documents", json.dumps(batch).encode(), 10, headers=key)).data
        )
        assert answer["status"] == 202, answer
        job_id = answer["job"]["job_id"]
        again = json.loads(
            (await nc.request("rag.documents", json.dumps(batch).encode(), 10, headers=key)).data
        )
        assert (again["status"], again["job"]["job_id"], again["replayed"]) == (202, job_id, True)
        for bad, code in ((b"not json", 422), (b'{"documents": []}', 422), (b"{}", 422)):
            refused = json.loads((await nc.request("rag.documents", bad, 10)).data)
            assert refused["status"] == code, refused
            assert refused["error"]
    finally:
        await nc.close()
    await asyncio.to_thread(wait_job, stack, beta, job_id)
    async with httpx.AsyncClient(base_url=stack.url) as http:
        mine = await http.get("/v1/documents", params={"namespace": "bus"}, headers=beta.headers)
        assert "bus-note" in mine.text
        theirs = await http.get(f"/v1/ingest/{job_id}", headers={"Authorization": "Bearer x"})
        assert theirs.status_code == 401


async def test_no_tenant_reaches_another_or_ragbus_on_the_bus(
    stack: TenantStack, acme: Tenant, beta: Tenant, acme_secret: dict[str, Any]
) -> None:
    """Every attack of `bus_attacks`, by beta against acme and ragbus: 0 leaks."""
    await bus_attacks.assert_no_leak(
        bus_attacks.Parties(
            servers=[stack.nats_url],
            service_creds=stack.service_creds,
            attacker="beta",
            victim="acme",
            attacker_creds=beta.nats_creds,
            victim_creds=acme.nats_creds,
        )
    )
    async with httpx.AsyncClient(base_url=stack.url, headers=acme.headers) as http:
        view = await http.get(f"/v1/queries/{acme_secret['request_id']}")
        assert view.json()["status"] == "completed"


async def test_a_search_replica_answers_a_tenants_question_and_only_with_its_documents(
    stack: TenantStack, acme: Tenant, beta: Tenant, acme_secret: dict[str, Any]
) -> None:
    """The stack runs a search replica (`RAGBUS_SEARCH_REPLICAS=1`), on the service account's
    credentials: once its copy holds acme's document it answers acme's question with it, and
    beta's same question, from the same copy, does not see it."""
    creds = await asyncio.to_thread(Path(stack.service_creds).read_text)
    nc = await connect_with_creds([stack.nats_url], creds)
    seen: list[ReplicaSeen] = []

    async def note(msg: Any) -> None:
        seen.append(ReplicaSeen.model_validate_json(msg.data))

    try:
        await nc.subscribe(sj.SEARCH_REPLICAS, cb=note)

        async def serving() -> list[ReplicaSeen]:
            version = StoresVersion.model_validate_json(
                (await nc.request(sj.STORES_VERSION, b"", timeout=2)).data
            )
            return [s for s in seen if s.version == version]

        current = await until(serving, 120, interval=0.5)
        assert current, f"no replica serves a current copy: {seen[-3:]}"
        before = current[-1].answered
        question = "What is the Zephyr project codename?"
        view = await asyncio.to_thread(ask, stack, acme, question, namespaces=["docs"])
        assert view["status"] == "completed" and "secret-plan" in cited_documents(view)
        theirs = await asyncio.to_thread(ask, stack, beta, question, namespaces=["docs"])
        assert "secret-plan" not in cited_documents(theirs)

        async def answered() -> int:
            return max((s.answered for s in seen if s.version is not None), default=0)

        assert await until(answered, 10, satisfied=lambda n: n >= before + 2) >= before + 2, (
            "both searches went to the replica"
        )
    finally:
        await nc.close()


async def test_new_creds_for_a_tenant_and_for_one_made_before_accounts(
    stack: TenantStack, beta: Tenant
) -> None:
    """Lost credentials are issued again; a tenant a ragbus made when tenants were NATS users
    of one account is listed, and gets an account of its own with its first credentials."""
    again = await asyncio.to_thread(stack.cli, "tenant", "creds", "beta")
    assert again.returncode == 0, again.stderr
    nc = await connect_with_creds([stack.nats_url], again.stdout)
    await nc.close()
    redis = aioredis.from_url(
        started_redis_url(
            stack.env["RAGBUS_REDIS_URL"], Path(stack.env["RAGBUS_DATA_DIR"]) / "redis"
        )
    )
    legacy = {
        "tenant": "elder",
        "created_at": "2026-11-01T00:00:00+00:00",
        "revoked_at": None,
        "key_hashes": [],
        "nats_user": "tenant-elder",
        "nats_password_bcrypt": "$2a$10$" + "x" * 53,
        "limits": {},
    }
    await redis.hset("ragbus:tenants", "elder", json.dumps(legacy))
    await redis.aclose()
    listed = await asyncio.to_thread(stack.cli, "tenant", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    elder = next(t for t in json.loads(listed.stdout) if t["tenant"] == "elder")
    assert elder["nats_account"] is None
    async with httpx.AsyncClient(base_url=stack.url) as http:
        made = await http.post(
            "/v1/admin/tenants/elder/nats-creds", headers={"Authorization": f"Bearer {ADMIN}"}
        )
        assert made.status_code == 200, made.text
        gone = await http.post(
            "/v1/admin/tenants/nobody/nats-creds", headers={"Authorization": f"Bearer {ADMIN}"}
        )
        assert gone.status_code == 404
    nc = await connect_with_creds([stack.nats_url], made.json()["nats_creds"])
    try:
        info = await nc.jetstream().stream_info("RAG_EVENTS")
        assert info.config.subjects == ["rag.events.elder.>"]
    finally:
        await nc.close()
