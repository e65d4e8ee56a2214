"""Metadata filters through every door, on a real stack: HTTP (`POST /v1/queries`), the
OpenAI endpoint's extra field, MCP's `search` and `ask`, and the CLI's `--filter`.

Twelve documents in a namespace of their own share one topic (so every channel finds all of
them) and differ only in their metadata. Each filtered request must draw only on the documents
that pass, in every channel's ranking and in the fused list, and fill its `top_k` when enough
pass; a bad filter is refused at the door with where it is wrong."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from typing import Any

import httpx
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from contracts.filters import matches, parse_filter
from launcher.runtime import Runtime
from tests.integration.sse import read_events

pytestmark = pytest.mark.integration

SPACE = "filtered"
TEAMS = ("legal", "finance", "research")
METADATA = {
    f"harbour-{i:02d}": {
        "team": TEAMS[i % 3],
        "year": 2016 + i,
        "tags": ["harbour", "even" if i % 2 == 0 else "odd"],
        "published": f"{2016 + i}-0{1 + i % 9}-15",
        **({"draft": True} if i % 4 == 0 else {}),
    }
    for i in range(12)
}
FILTERS = [
    {"team": "legal"},
    {"year": {"$gte": 2022}},
    {"published": {"$lt": "2019-06-01"}},
    {"$or": [{"team": "finance"}, {"draft": True}]},
    {"tags": "odd", "team": {"$nin": ["legal"]}},
    {"$not": {"draft": {"$exists": True}}},
]
QUESTION = "How are ships guided into the harbour at night?"


def _passing(raw: dict[str, Any]) -> set[str]:
    where = parse_filter(raw)
    return {doc for doc, meta in METADATA.items() if matches(where, meta)}


@pytest.fixture(scope="module")
async def corpus(api_url: str, stack: Runtime) -> str:
    documents = [
        {
            "id": doc_id,
            "title": f"Harbour log {doc_id[-2:]}",
            "namespace": SPACE,
            "metadata": meta,
            "text": (
                f"Harbour log {doc_id[-2:]}. Ships are guided into the harbour at night by a "
                f"lighthouse and pilot boats. The {meta['team']} team wrote this log in "
                f"{meta['year']}. Pilots meet ships at the harbour mouth and guide them in."
            ),
        }
        for doc_id, meta in METADATA.items()
    ]
    async with httpx.AsyncClient(base_url=api_url, timeout=60) as http:
        response = await http.post("/v1/documents", json={"documents": documents})
        assert response.status_code == 202, response.text
        job_id = response.json()["job_id"]
        for _ in range(600):
            job = (await http.get(f"/v1/ingest/{job_id}")).json()
            if job["status"] != "running":
                break
            await asyncio.sleep(0.2)
        assert job["documents_done"] == len(documents), job
    return api_url


async def _retrieved(http: httpx.AsyncClient, raw: dict[str, Any], top_k: int) -> dict[str, Any]:
    response = await http.post(
        "/v1/queries",
        json={
            "query": QUESTION,
            "namespaces": [SPACE],
            "mode": "retrieve",
            "top_k": top_k,
            "filter": raw,
        },
    )
    assert response.status_code == 202, response.text
    events = await read_events(http, response.json()["events_url"])
    answer = next(e for e in events if e.event == "answer")
    retrieval: dict[str, Any] = answer.data["data"]["metadata"]["retrieval"]
    return retrieval


@pytest.mark.parametrize("raw", FILTERS)
async def test_every_channel_and_the_fused_list_keep_to_the_filter(
    corpus: str, http: httpx.AsyncClient, raw: dict[str, Any]
) -> None:
    passing = _passing(raw)
    assert 0 < len(passing) < len(METADATA)
    top_k = 3
    retrieval = await _retrieved(http, raw, top_k)
    fused = [item["document_id"] for item in retrieval["fused"]]
    assert set(fused) <= passing, (raw, fused)
    assert len(fused) == min(top_k, len(passing))  # full whenever enough pass
    for channel, ranking in retrieval["channels"].items():
        found = {item["document_id"] for item in ranking}
        assert found <= passing, (raw, channel, found)


async def test_no_filter_still_draws_on_every_document(
    corpus: str, http: httpx.AsyncClient
) -> None:
    response = await http.post(
        "/v1/queries",
        json={"query": QUESTION, "namespaces": [SPACE], "mode": "retrieve", "top_k": 12},
    )
    events = await read_events(http, response.json()["events_url"])
    retrieval = next(e for e in events if e.event == "answer").data["data"]["metadata"]
    assert len({item["document_id"] for item in retrieval["retrieval"]["fused"]}) == 12


async def test_an_answer_cites_only_documents_that_pass(
    corpus: str, http: httpx.AsyncClient
) -> None:
    raw = {"team": "research", "year": {"$lt": 2025}}
    response = await http.post(
        "/v1/queries", json={"query": QUESTION, "namespaces": [SPACE], "filter": raw}
    )
    assert response.status_code == 202, response.text
    events = await read_events(http, response.json()["events_url"])
    answer = next(e for e in events if e.event == "answer").data["data"]
    cited = (
        {c["document_id"] for c in answer["citations"].values()} if answer["citations"] else set()
    )
    assert cited and cited <= _passing(raw)
    state = (await http.get(f"/v1/queries/{response.json()['request_id']}")).json()
    assert state["filter"] == {"$and": [{"team": {"$eq": "research"}}, {"year": {"$lt": 2025}}]}


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"year": {"$regex": "20.*"}}, "unknown operator '$regex'"),
        ({"published": {"$gt": "last year"}}, "a number or an ISO 8601 date"),
        ([{"team": "legal"}], "filter: Input should be a valid dictionary"),
    ],
)
async def test_a_bad_filter_is_a_422_that_says_where(
    http: httpx.AsyncClient, raw: Any, says: str
) -> None:
    response = await http.post("/v1/queries", json={"query": QUESTION, "filter": raw})
    assert response.status_code == 422
    assert says in response.text and "filter" in response.text


async def test_the_openai_door_takes_the_filter_as_an_extra_field(
    corpus: str, http: httpx.AsyncClient
) -> None:
    raw = {"team": "finance"}
    response = await http.post(
        "/v1/chat/completions",
        json={
            "model": f"ragbus:{SPACE}",
            "messages": [{"role": "user", "content": QUESTION}],
            "filter": raw,
        },
    )
    assert response.status_code == 200, response.text
    cited = {c["document_id"] for c in response.json()["citations"]}
    assert cited and cited <= _passing(raw)
    bad = await http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": QUESTION}], "filter": {"a": None}},
    )
    assert bad.status_code == 422
    assert bad.json()["error"]["param"] == "filter"
    assert "null is not a value" in bad.json()["error"]["message"]


async def test_mcp_search_and_ask_take_the_filter(corpus: str) -> None:
    raw = {"year": {"$lte": 2018}}
    async with (
        create_mcp_http_client() as client_http,
        Client(streamable_http_client(f"{corpus}/mcp", http_client=client_http)) as client,
    ):
        searched = await client.call_tool(
            "search", {"query": QUESTION, "namespaces": [SPACE], "top_k": 5, "filter": raw}
        )
        assert not searched.is_error, searched
        passages = (searched.structured_content or {})["passages"]
        assert {p["document_id"] for p in passages} <= _passing(raw)
        assert len(passages) == len(_passing(raw))
        asked = await client.call_tool(
            "ask", {"question": QUESTION, "namespaces": [SPACE], "filter": raw}
        )
        assert not asked.is_error, asked
        cited = {c["document_id"] for c in (asked.structured_content or {})["citations"]}
        assert cited and cited <= _passing(raw)
        refused = await client.call_tool("search", {"query": QUESTION, "filter": {"$or": []}})
        assert refused.is_error
        assert "non-empty list of filters" in str(refused.content)


async def test_the_cli_takes_a_filter_and_refuses_a_bad_one_before_sending(corpus: str) -> None:
    raw = {"team": "legal", "draft": {"$exists": False}}
    command = [sys.executable, "-m", "cli", "ask", QUESTION, "--namespace", SPACE]
    done = await asyncio.to_thread(
        subprocess.run,
        [*command, "--api", corpus, "--filter", json.dumps(raw)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    named = {doc for doc in METADATA if f"Harbour log {doc[-2:]}" in done.stdout}
    assert named and named <= _passing(raw), done.stdout
    bad = await asyncio.to_thread(
        subprocess.run,
        [*command, "--api", corpus, "--filter", '{"year": {"$gt": true}}'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", bad.stderr).split())  # typer's box, unwrapped
    assert "--filter: year.$gt: a range takes a number or an ISO 8601 date" in said, said


async def test_the_catalogue_lists_metadata_and_takes_the_filter(
    corpus: str, http: httpx.AsyncClient
) -> None:
    listed = (await http.get("/v1/documents", params={"namespace": SPACE})).json()
    assert {doc["id"]: doc["metadata"] for doc in listed["documents"]} == METADATA
    raw = {"$or": [{"team": "legal"}, {"year": {"$gt": 2025}}]}
    narrowed = await http.get(
        "/v1/documents", params={"namespace": SPACE, "filter": json.dumps(raw), "limit": 3}
    )
    assert narrowed.status_code == 200, narrowed.text
    ids = [doc["id"] for doc in narrowed.json()["documents"]]
    assert ids == sorted(_passing(raw))[:3]  # filtered first, then cut to the limit
    bad = await http.get("/v1/documents", params={"namespace": SPACE, "filter": '{"a": {"$x": 1}}'})
    assert bad.status_code == 422
    assert "unknown operator '$x'" in bad.text
