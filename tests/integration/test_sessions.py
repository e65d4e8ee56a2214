"""Conversations on the real broker: a follow-up's pronoun is resolved from the turn before
it, a memory of one session is never recalled in another, and forgetting a session removes
its turns and its memories."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.integration.polling import until
from tests.integration.sse import ask

pytestmark = pytest.mark.integration


def session() -> str:
    return f"it-{uuid.uuid4().hex[:12]}"


def phases(events: list[Any], name: str) -> list[dict[str, Any]]:
    return [
        e.data["data"] for e in events if e.event == "phase" and e.data["data"]["phase"] == name
    ]


async def memories(http: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    listed = await http.get(f"/v1/sessions/{session_id}/memories")
    assert listed.status_code == 200, listed.text
    found: list[dict[str, Any]] = listed.json()["memories"]
    return found


async def test_a_two_turn_conversation_resolves_its_pronoun(http: httpx.AsyncClient) -> None:
    sid = session()
    first = await ask(http, "Who built the Lighthouse of Alexandria?", sid)
    assert "Sostratus" in first["answer"]["content"]

    follow_up = "When did earthquakes damage it?"
    second = await ask(http, follow_up, sid)
    rewrite = phases(second["events"], "query_rewrite")
    assert [p["status"] for p in rewrite if p["status"] != "in_progress"] == ["completed"]
    done = rewrite[-1]["metadata"]
    assert done["method"] == "rules" and done["turns"] == 1
    standalone = second["answer"]["metadata"]["standalone_query"]
    assert standalone == done["standalone_query"]
    assert "Lighthouse of Alexandria" in standalone
    assert second["view"]["query"] == follow_up  # the question as asked is kept
    cited = {c["document_id"] for c in second["answer"]["citations"].values()}
    assert "lighthouse-alexandria" in cited, second["answer"]
    assert "956" in second["answer"]["content"]

    async def both_finished() -> list[dict[str, Any]] | None:
        turns = (await http.get(f"/v1/sessions/{sid}")).json()["turns"]
        return turns if all(t["answer"] for t in turns) else None

    turns = await until(both_finished)
    assert turns is not None
    assert [t["request_id"] for t in turns] == [first["id"], second["id"]]
    assert [t["query"] for t in turns] == ["Who built the Lighthouse of Alexandria?", follow_up]
    assert turns[1]["standalone_query"] == standalone

    # the same words with no conversation before them stay as they are
    alone = await ask(http, follow_up, session())
    assert alone["answer"]["metadata"]["standalone_query"] == follow_up
    assert phases(alone["events"], "query_rewrite")[-1]["metadata"]["method"] == "none"


async def test_a_memory_of_one_session_never_appears_in_another(http: httpx.AsyncClient) -> None:
    mine, theirs = session(), session()
    await ask(http, "I am allergic to penicillin, so remember that please.", mine)
    remembered = await until(lambda: memories(http, mine))
    assert [m["kind"] for m in remembered] == ["fact"]
    assert "penicillin" in remembered[0]["text"]

    recalled = await ask(http, "Which antibiotic am I allergic to?", mine)
    memory_phase = phases(recalled["events"], "memory_search")[-1]
    assert memory_phase["metadata"]["count"] >= 1
    kinds = {c["kind"]: c for c in recalled["answer"]["citations"].values()}
    assert "memory" in kinds, recalled["answer"]
    assert kinds["memory"]["document_id"].startswith("memory:")

    other = await ask(http, "Which antibiotic am I allergic to?", theirs)
    assert phases(other["events"], "memory_search")[-1]["metadata"]["count"] == 0
    assert all(c["kind"] == "document" for c in other["answer"]["citations"].values())
    assert "penicillin" not in other["answer"]["content"].lower()
    assert await memories(http, theirs) == []

    # a memory deleted is never recalled again, even before its vector is gone
    fact = remembered[0]["memory_id"]
    deleted = await http.delete(f"/v1/sessions/{mine}/memories/{fact}")
    assert deleted.status_code == 204, deleted.text
    assert fact not in {m["memory_id"] for m in await memories(http, mine)}
    assert (await http.delete(f"/v1/sessions/{mine}/memories/{fact}")).status_code == 404
    asked_again = await ask(http, "Which antibiotic am I allergic to?", mine)
    recalled_ids = {
        c["chunk_id"] for c in asked_again["answer"]["citations"].values() if c["kind"] == "memory"
    }
    assert fact not in recalled_ids


async def test_forgetting_a_session_removes_its_turns_and_memories(
    http: httpx.AsyncClient,
) -> None:
    sid = session()
    await ask(http, "My favourite wonder is the Colossus of Rhodes.", sid)
    await ask(http, "What was it made of?", sid)
    assert await until(lambda: memories(http, sid))

    forgotten = await http.delete(f"/v1/sessions/{sid}")
    assert forgotten.status_code == 200, forgotten.text
    assert forgotten.json()["turns"] == 2 and forgotten.json()["memories"] >= 1
    assert (await http.get(f"/v1/sessions/{sid}")).status_code == 404
    assert (await http.get(f"/v1/sessions/{sid}/memories")).status_code == 404  # unknown now
    assert (await http.delete(f"/v1/sessions/{sid}")).status_code == 404

    again = await ask(http, "What is my favourite wonder?", sid)
    assert phases(again["events"], "memory_search")[-1]["metadata"]["count"] == 0
    rewrite = phases(again["events"], "query_rewrite")[-1]["metadata"]
    assert rewrite["turns"] == 0  # the forgotten turns are not read either
