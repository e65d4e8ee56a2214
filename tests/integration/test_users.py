"""Users inside a tenant, attacked, on a real stack (its own nats-server and redis-server).

The tenant's key (`token` mode's shared token: the default tenant's administrator) makes three
users: alice (group `legal`), bob (group `sales`) and carol (no group). Documents of one topic
carry planted markers: one only group `legal` may read, one only alice, a file only `legal`,
and two the whole tenant. Bob tries to reach what only `legal` or alice may read through every
surface a user has: every channel's ranking and the fused list (with filters that try to
widen), an answer, `/v1/chat`, a research request and its children, the OpenAI door, MCP's
`search`, `ask` and resources, the catalogue, downloads, deletions, re-uploads under the same
id, requests, events, jobs, sessions, memories and Idempotency-Keys. The spies (alice, and the
tenant's key) see their own markers first, so a miss is a leak stopped, not a search that
found nothing. A tenant's NATS account stays the boundary on the bus (`test_tenants.py`
attacks it); a user has no NATS credentials.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from contracts.filters import matches, parse_filter
from launcher.layout import WORKER_KINDS
from tests.environment import stack_environment
from tests.integration.conftest import own_services, running, serving_api
from tests.integration.polling import until
from tests.integration.sse import SseEvent, read_events

pytestmark = pytest.mark.integration

TOKEN = "the-tenant-key-of-the-users-suite-0123456789"
SPACE = "harbour"
MARKERS = {
    "legal-memo": "QX-LEGAL-7731",
    "alice-note": "QX-ALICE-4410",
    "legal-file.md": "QX-FILE-5582",
    "open-one": "QX-OPEN-2290",
    "open-two": "QX-OPEN-2291",
}
OPEN = {"open-one", "open-two"}
LEGAL_ONLY = {"legal-memo", "legal-file.md"}
HIDDEN_FROM_BOB = LEGAL_ONLY | {"alice-note"}
QUESTION = "How do pilot boats guide ships into Kestrel Harbour at night?"


def _text(document_id: str) -> str:
    return (
        f"Kestrel Harbour night pilotage, note {document_id}. Pilot boats meet ships at the "
        "Kestrel Harbour mouth after dark and guide them past the breakwater by the "
        f"lighthouse. The reference code of this note is {MARKERS[document_id]}. Harbour "
        "pilots keep the channel lights in view."
    )


@dataclass
class Users:
    url: str
    keys: dict[str, str]  # "tenant", "alice", "bob", "carol"
    jobs: dict[str, str]  # who -> a job of theirs

    def client(self, who: str) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.keys[who]}"}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=120)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with own_services(
        tmp_path_factory.mktemp("users"), auth_mode="token", api_token=TOKEN
    ) as settings:
        yield settings


async def _job_done(http: httpx.AsyncClient, job_id: str) -> None:
    async def job() -> dict[str, Any]:
        found: dict[str, Any] = (await http.get(f"/v1/ingest/{job_id}")).json()
        return found

    done = await until(job, timeout=180, satisfied=lambda j: j["status"] != "running")
    assert done["status"] == "completed", done


@pytest.fixture(scope="module")
async def users(services: Any) -> AsyncIterator[Users]:
    async with (
        running(services, orchestrator=True, workers=WORKER_KINDS) as runtime,
        serving_api(runtime) as url,
    ):
        keys = {"tenant": TOKEN}
        stack = Users(url, keys, {})
        async with stack.client("tenant") as admin:
            for name, groups in (("alice", ["legal"]), ("bob", ["sales"]), ("carol", [])):
                made = await admin.post("/v1/users", json={"user": name, "groups": groups})
                assert made.status_code == 201, made.text
                keys[name] = made.json()["api_key"]
            texts = [
                {"id": "legal-memo", "access": {"groups": ["legal"]}},
                {"id": "open-one"},
                {"id": "open-two"},
            ]
            sent = await admin.post(
                "/v1/documents",
                json={
                    "documents": [
                        {**doc, "namespace": SPACE, "title": doc["id"], "text": _text(doc["id"])}
                        for doc in texts
                    ]
                },
            )
            assert sent.status_code == 202, sent.text
            stack.jobs["tenant"] = sent.json()["job_id"]
            await _job_done(admin, stack.jobs["tenant"])
            filed = await admin.post(
                "/v1/documents",
                data={"namespace": SPACE, "access": json.dumps({"groups": ["legal"]})},
                files={"files": ("legal-file.md", _text("legal-file.md").encode(), "text/plain")},
            )
            assert filed.status_code == 202, filed.text
            await _job_done(admin, filed.json()["job_id"])
        async with stack.client("alice") as alice:
            own = await alice.post(
                "/v1/documents",
                json={
                    "documents": [
                        {
                            "id": "alice-note",
                            "namespace": SPACE,
                            "text": _text("alice-note"),
                            "access": {"users": ["alice"]},
                        }
                    ]
                },
            )
            assert own.status_code == 202, own.text
            stack.jobs["alice"] = own.json()["job_id"]
            await _job_done(alice, stack.jobs["alice"])
        yield stack


def _all_text(events: list[SseEvent]) -> str:
    return json.dumps([event.data for event in events])


def _leaks(text: str, hidden: set[str] = HIDDEN_FROM_BOB) -> set[str]:
    return {doc for doc in hidden if MARKERS[doc] in text or f'"{doc}"' in text}


async def _retrieved(
    http: httpx.AsyncClient, query: str = QUESTION, **fields: Any
) -> tuple[dict[str, Any], list[SseEvent]]:
    body = {"query": query, "namespaces": [SPACE], "mode": "retrieve", "top_k": 8, **fields}
    response = await http.post("/v1/queries", json=body)
    assert response.status_code == 202, response.text
    events = await read_events(http, response.json()["events_url"])
    answer = next(e for e in events if e.event == "answer")
    return answer.data["data"]["metadata"]["retrieval"], events


def _documents(retrieval: dict[str, Any]) -> tuple[set[str], dict[str, set[str]]]:
    fused = {item["document_id"] for item in retrieval["fused"]}
    channels = {
        name: {item["document_id"] for item in ranking}
        for name, ranking in retrieval["channels"].items()
    }
    return fused, channels


async def test_only_the_tenants_key_administers_users(users: Users) -> None:
    async with users.client("bob") as bob, users.client("tenant") as admin:
        assert (await bob.post("/v1/users", json={"user": "mallory"})).status_code == 403
        assert (await bob.patch("/v1/users/bob", json={"groups": ["legal"]})).status_code == 403
        assert (await bob.get("/v1/users")).status_code == 403
        assert (await bob.post("/v1/users/alice/key")).status_code == 403
        me = (await bob.get("/v1/whoami")).json()
        assert me == {"tenant": "default", "auth_mode": "token", "user": "bob", "groups": ["sales"]}
        listed = (await admin.get("/v1/users")).json()
        assert [u["user"] for u in listed] == ["alice", "bob", "carol"]
        assert all("api_key" not in u and "key_hashes" not in u for u in listed)
    async with httpx.AsyncClient(base_url=users.url) as nobody:
        forged = {"Authorization": "Bearer rbu_" + "A" * 43}
        assert (await nobody.get("/v1/whoami", headers=forged)).status_code == 401


async def test_the_spies_see_their_own_markers_first(users: Users) -> None:
    async with users.client("alice") as alice, users.client("tenant") as admin:
        fused, _ = _documents((await _retrieved(alice))[0])
        assert fused == set(MARKERS), fused  # alice: legal's, hers and the open ones
        fused, _ = _documents((await _retrieved(admin))[0])
        assert fused == set(MARKERS)
        listed = (await alice.get("/v1/documents", params={"namespace": SPACE})).json()
        assert {d["id"] for d in listed["documents"]} == set(MARKERS)
        memo = next(d for d in listed["documents"] if d["id"] == "legal-memo")
        assert memo["access"] == {"groups": ["legal"], "users": []}
        assert "_access" not in (memo["metadata"] or {})


WIDENING = [
    None,
    {"_access": {"$exists": True}},
    {"$or": [{"_access": {"$in": ["group:legal", "user:alice"]}}, {"_access": {"$exists": False}}]},
    {"$not": {"_access": {"$exists": False}}},
]


@pytest.mark.parametrize("query", [QUESTION, "the legal reference code 7731", "alice code 4410"])
@pytest.mark.parametrize("raw", WIDENING)
async def test_no_channel_gives_a_user_what_it_may_not_read(
    users: Users, query: str, raw: dict[str, Any] | None
) -> None:
    async with users.client("bob") as bob:
        retrieval, events = await _retrieved(bob, query, **({"filter": raw} if raw else {}))
    fused, channels = _documents(retrieval)
    # what bob may read and the filter passes: only the open notes (no readers named)
    readable = OPEN if raw is None or matches(parse_filter(raw), {}) else set()
    assert fused <= readable, (raw, fused)
    if raw is None and query == QUESTION:
        assert fused == OPEN  # full whenever enough may be read
    for name, found in channels.items():
        assert found <= readable, (name, found)
    assert not _leaks(_all_text(events))


async def test_answers_chat_research_and_the_openai_door_keep_to_the_users_documents(
    users: Users,
) -> None:
    async with users.client("bob") as bob:
        asked = await bob.post(
            "/v1/queries", json={"query": "What is the legal reference code 7731 about?"}
        )
        events = await read_events(bob, asked.json()["events_url"])
        assert events[-1].event == "done"
        assert not _leaks(_all_text(events))
        chatted = await read_events(
            bob,
            "/v1/chat",
            method="POST",
            json_body={"query": QUESTION, "namespaces": [SPACE]},
        )
        answer = next(e for e in chatted if e.event == "answer").data["data"]
        assert {c["document_id"] for c in answer["citations"].values()} <= OPEN
        assert not _leaks(_all_text(chatted))
        research = await bob.post(
            "/v1/queries",
            json={
                "query": f"{QUESTION} And what codes do the notes give?",
                "mode": "research",
                "namespaces": [SPACE],
            },
        )
        assert research.status_code == 202, research.text
        events = await read_events(bob, research.json()["events_url"], timeout=240)
        assert events[-1].event == "done"
        assert not _leaks(_all_text(events))
        view = (await bob.get(f"/v1/queries/{research.json()['request_id']}")).json()
        for child in view["children"]:  # the children read as bob too
            child_view = (await bob.get(f"/v1/queries/{child}")).json()
            assert child_view["user"] == "bob"
            assert not _leaks(json.dumps(child_view))
        completed = await bob.post(
            "/v1/chat/completions",
            json={
                "model": f"ragbus:{SPACE}",
                "messages": [{"role": "user", "content": "What is alice's code 4410?"}],
            },
        )
        assert completed.status_code == 200, completed.text
        assert {c["document_id"] for c in completed.json()["citations"]} <= OPEN
        assert not _leaks(completed.text)


async def test_mcp_search_ask_and_resources_keep_to_the_users_documents(users: Users) -> None:
    async def session(who: str) -> tuple[set[str], set[str], bool]:
        headers = {"Authorization": f"Bearer {users.keys[who]}"}
        async with (
            create_mcp_http_client(headers=headers) as client_http,
            Client(streamable_http_client(f"{users.url}/mcp", http_client=client_http)) as client,
        ):
            searched = await client.call_tool(
                "search", {"query": QUESTION, "namespaces": [SPACE], "top_k": 8}
            )
            assert not searched.is_error, searched
            found = {p["document_id"] for p in (searched.structured_content or {})["passages"]}
            asked = await client.call_tool(
                "ask", {"question": "What is the legal code 7731?", "namespaces": [SPACE]}
            )
            assert not asked.is_error, asked
            assert who != "bob" or not _leaks(str(asked.content))
            listed = await client.list_resources()
            names = {r.title or "" for r in listed.resources}
            try:
                read = await client.read_resource(f"ragbus://documents/{SPACE}/legal-file.md")
                readable = "QX-FILE-5582" in str(read)
            except Exception:  # the MCP error a missing document answers
                readable = False
            return found, names, readable

    found, names, readable = await session("alice")  # the spy
    assert found == set(MARKERS) and names >= set(MARKERS) and readable
    found, names, readable = await session("bob")
    assert found == OPEN and not (names & HIDDEN_FROM_BOB) and not readable


async def test_the_catalogue_downloads_and_deletions_keep_to_the_users_documents(
    users: Users,
) -> None:
    async with users.client("bob") as bob, users.client("alice") as alice:
        listed = (await bob.get("/v1/documents", params={"namespace": SPACE})).json()
        assert {d["id"] for d in listed["documents"]} == OPEN
        narrowed = await bob.get(
            "/v1/documents",
            params={"namespace": SPACE, "filter": json.dumps({"_access": {"$exists": True}})},
        )
        assert narrowed.json()["documents"] == []
        params = {"namespace": SPACE}
        assert (await alice.get("/v1/documents/legal-file.md", params=params)).status_code == 200
        hidden = await bob.get("/v1/documents/legal-file.md", params=params)
        assert hidden.status_code == 404 and "QX-FILE" not in hidden.text
        assert (await bob.delete("/v1/documents/legal-memo", params=params)).status_code == 404
        replaced = await bob.post(
            "/v1/documents",
            json={"documents": [{"id": "legal-memo", "namespace": SPACE, "text": "bob's"}]},
        )
        assert replaced.status_code == 403, replaced.text
        refiled = await bob.post(
            "/v1/documents",
            data={"namespace": SPACE},
            files={"files": ("legal-file.md", b"bob's own file", "text/markdown")},
        )
        assert refiled.status_code == 403, refiled.text
        fused, _ = _documents((await _retrieved(alice))[0])
        assert fused >= LEGAL_ONLY  # still there, as they were


async def test_requests_events_jobs_and_keys_are_each_users_own(users: Users) -> None:
    async with (
        users.client("alice") as alice,
        users.client("bob") as bob,
        users.client("tenant") as admin,
    ):
        key = {"Idempotency-Key": "users-suite-key-1"}
        mine = await alice.post("/v1/queries", json={"query": QUESTION}, headers=key)
        rid = mine.json()["request_id"]
        await read_events(alice, mine.json()["events_url"])
        for path in (f"/v1/queries/{rid}", f"/v1/queries/{rid}/events"):
            assert (await bob.get(path)).status_code == 404, path
        assert (await bob.delete(f"/v1/queries/{rid}")).status_code == 404
        for who, sees in ((bob, False), (alice, True)):
            recent = (await who.get("/v1/queries")).json()["requests"]
            assert (rid in {r["request_id"] for r in recent}) is sees
        seen = (await admin.get(f"/v1/queries/{rid}")).json()  # the tenant's key sees all
        assert seen["user"] == "alice"
        # the same key from bob is bob's own: neither alice's request nor a conflict
        his = await bob.post("/v1/queries", json={"query": "another question"}, headers=key)
        assert his.status_code == 202 and his.json()["request_id"] != rid
        job = users.jobs["alice"]
        for path in (f"/v1/ingest/{job}", f"/v1/ingest/{job}/events"):
            assert (await bob.get(path)).status_code == 404, path
        assert (await alice.get(f"/v1/ingest/{job}")).status_code == 200
        assert (await admin.get(f"/v1/ingest/{job}")).status_code == 200


async def test_sessions_and_memories_are_each_users_own(users: Users) -> None:
    async with users.client("alice") as alice, users.client("bob") as bob:
        said = "My badge number is QX-BADGE-9090."
        first = await alice.post("/v1/queries", json={"query": said, "session_id": "team-chat"})
        await read_events(alice, first.json()["events_url"])
        assert (await alice.get("/v1/sessions/team-chat")).status_code == 200
        for path in ("/v1/sessions/team-chat", "/v1/sessions/team-chat/memories"):
            assert (await bob.get(path)).status_code == 404, path
        assert (await bob.delete("/v1/sessions/team-chat")).status_code == 404
        # bob's "team-chat" is another conversation: nothing of alice's is recalled in it
        follow = await bob.post(
            "/v1/queries", json={"query": "What is my badge number?", "session_id": "team-chat"}
        )
        events = await read_events(bob, follow.json()["events_url"])
        assert "QX-BADGE-9090" not in _all_text(events)
        turns = (await bob.get("/v1/sessions/team-chat")).json()["turns"]
        assert [t["query"] for t in turns] == ["What is my badge number?"]
        hers = (await alice.get("/v1/sessions/team-chat")).json()["turns"]
        assert [t["query"] for t in hers] == [said]


async def test_metadata_may_not_name_readers_itself(users: Users) -> None:
    async with users.client("bob") as bob:
        forged = {"id": "forged", "namespace": SPACE, "text": "x", "metadata": {"_access": []}}
        refused = await bob.post("/v1/documents", json={"documents": [forged]})
        assert refused.status_code == 422 and "reserved" in refused.text
        refused = await bob.post(
            "/v1/documents",
            data={"namespace": SPACE, "metadata": json.dumps({"_access": ["user:bob"]})},
            files={"files": ("forged.md", b"forged", "text/markdown")},
        )
        assert refused.status_code == 422 and "reserved" in refused.text
        bad = await bob.post(
            "/v1/documents",
            data={"namespace": SPACE, "access": json.dumps({"groups": ["Not A Group"]})},
            files={"files": ("forged.md", b"forged", "text/markdown")},
        )
        assert bad.status_code == 422 and "access" in bad.text


async def test_groups_and_revocation_take_effect_at_once(users: Users) -> None:
    async with users.client("carol") as carol, users.client("tenant") as admin:
        fused, _ = _documents((await _retrieved(carol))[0])
        assert fused == OPEN
        changed = await admin.patch("/v1/users/carol", json={"groups": ["legal"]})
        assert changed.status_code == 200 and changed.json()["groups"] == ["legal"]
        fused, _ = _documents((await _retrieved(carol))[0])
        assert fused == OPEN | LEGAL_ONLY
        assert (await admin.delete("/v1/users/carol")).status_code == 200
        assert (await carol.get("/v1/whoami")).status_code == 401
        again = await admin.post("/v1/users", json={"user": "carol"})
        assert again.status_code == 409  # a revoked user's name is never given again
        assert (await admin.post("/v1/users/carol/key")).status_code == 404


async def _cli(users: Users, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cli", *args, "--api", users.url, "--token", TOKEN]
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=120
    )


async def test_the_cli_administers_users_and_a_users_key_asks_as_that_user(
    users: Users,
) -> None:
    made = await _cli(users, "user", "create", "dave", "--group", "legal", "--json")
    assert made.returncode == 0, made.stderr
    dave = json.loads(made.stdout)
    assert dave["groups"] == ["legal"] and dave["api_key"].startswith("rbu_")
    listed = await _cli(users, "user", "list")
    assert "dave: legal; active" in listed.stdout, listed.stdout
    changed = await _cli(users, "user", "groups", "dave", "--group", "sales", "--json")
    assert json.loads(changed.stdout)["groups"] == ["sales"]
    asked = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "cli",
            "ask",
            QUESTION,
            "--namespace",
            SPACE,
            "--api",
            users.url,
            "--token",
            dave["api_key"],
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert asked.returncode == 0, asked.stderr
    assert not _leaks(asked.stdout)
    revoked = await _cli(users, "user", "revoke", "dave")
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    refused = await _cli(users, "user", "rotate-key", "dave")
    assert refused.returncode != 0 and "no active user" in refused.stderr


async def test_mcp_ingest_names_the_readers_of_what_it_sends(users: Users) -> None:
    async def mcp(who: str, tool: str, arguments: dict[str, Any]) -> Any:
        headers = {"Authorization": f"Bearer {users.keys[who]}"}
        async with (
            create_mcp_http_client(headers=headers) as client_http,
            Client(streamable_http_client(f"{users.url}/mcp", http_client=client_http)) as client,
        ):
            done = await client.call_tool(tool, arguments)
            assert not done.is_error, done
            return done.structured_content or {}

    sent = await mcp(
        "alice",
        "ingest",
        {
            "documents": [{"text": _text("alice-note"), "document_id": "mcp-note"}],
            "namespace": "mcp-space",
            "access": {"users": ["alice"]},
        },
    )
    async with users.client("alice") as alice:
        await _job_done(alice, sent["job_id"])
    question = {"query": QUESTION, "namespaces": ["mcp-space"], "top_k": 4}
    assert {p["document_id"] for p in (await mcp("alice", "search", question))["passages"]} == {
        "mcp-note"
    }
    assert (await mcp("bob", "search", question))["passages"] == []


async def test_ragbus_ingest_names_the_readers_of_a_folder(
    users: Users, services: Any, tmp_path: Path
) -> None:
    """The operator's `ragbus ingest --access`: a folder's files and texts for `legal` only."""
    folder = tmp_path / "board"
    folder.mkdir()
    (folder / "minutes.md").write_text(
        "# Minutes\n\nPilot boats guide ships into Kestrel Harbour at night; the board met."
    )
    (folder / "notes.txt").write_text("Kestrel Harbour pilots' board notes: dredging at dawn.")
    env = stack_environment(services)
    command = [sys.executable, "-m", "cli", "ingest", str(folder), "--namespace", "board"]
    done = await asyncio.to_thread(
        subprocess.run,
        [*command, "--access", '{"groups": ["legal"]}'],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    question = {"namespaces": ["board"], "top_k": 4}
    async with users.client("alice") as alice, users.client("bob") as bob:
        found, _ = _documents((await _retrieved(alice, QUESTION, **question))[0])
        assert found == {"minutes.md", "notes.txt"}
        found, _ = _documents((await _retrieved(bob, QUESTION, **question))[0])
        assert found == set()
