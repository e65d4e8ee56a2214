"""The `search` tool keeps to the request's metadata filter and to what the request's user may
read, and its own `filter` argument only narrows them further: a call can never widen what its
request may see."""

from __future__ import annotations

from pathlib import Path

from contracts.access import ACCESS_KEY, DocumentAccess, Reader
from contracts.ingest import DocumentIn
from contracts.models import ToolCall
from infra.retrieval.chunking import chunk_document
from infra.retrieval.lexical import SparseEncoder
from infra.runtime.bus import Bus
from infra.runtime.resources import Resources
from infra.settings import Settings
from tests.unit.fakes import FakeEncoder
from workers.tool.registry import ToolRegistry, calling_filter, calling_reader
from workers.tool.search_tool import register_search

TEAMS = {"memo-legal": "legal", "memo-finance": "finance", "memo-ops": "ops"}
READERS = {"memo-legal": DocumentAccess(groups=["legal"]), "memo-finance": None, "memo-ops": None}


async def _registry(tmp_path: Path) -> ToolRegistry:
    from faststream.nats import NatsBroker

    resources = Resources(Settings(data_dir=tmp_path), Bus(NatsBroker()))
    encoder = FakeEncoder()
    resources._encoder = encoder  # type: ignore[assignment]
    store = await resources.vectors()
    for doc_id, team in TEAMS.items():
        doc = DocumentIn(
            id=doc_id,
            title=doc_id,
            text=f"The harbour memo of the {team} team about pilot boats.",
            metadata={"team": team, "year": 2020 if team != "ops" else 2024},
            access=READERS[doc_id],
        )
        chunks = chunk_document(doc)
        store.upsert_chunks(
            "default",
            chunks,
            encoder.encode([c.text for c in chunks]),
            [SparseEncoder().encode_document(c.text) for c in chunks],
            doc.content_hash(),
            None,
            doc.stored_metadata(),
        )
    registry = ToolRegistry()
    register_search(registry, resources)
    return registry


async def _found(registry: ToolRegistry, **arguments: object) -> set[str]:
    outcome = await registry.call(
        ToolCall(id="c1", name="search", arguments={"query": "harbour memo", **arguments})
    )
    assert outcome.ok, outcome.error
    return {doc for doc in TEAMS if f"] {doc} (" in outcome.output}


async def test_the_request_filter_binds_and_the_calls_own_only_narrows(tmp_path: Path) -> None:
    registry = await _registry(tmp_path)
    assert await _found(registry) == set(TEAMS)
    assert await _found(registry, filter={"year": 2020}) == {"memo-legal", "memo-finance"}
    token = calling_filter.set({"team": {"$in": ["legal", "ops"]}})
    try:
        assert await _found(registry) == {"memo-legal", "memo-ops"}
        assert await _found(registry, filter={"year": 2020}) == {"memo-legal"}
        # a call asking for what its request may not see gets nothing of it
        assert await _found(registry, filter={"team": "finance"}) == set()
        bad = await registry.call(
            ToolCall(
                id="c1", name="search", arguments={"query": "memo", "filter": {"team": {"$x": 1}}}
            )
        )
        assert not bad.ok and str(bad.error).startswith("filter: team: unknown operator '$x'")
    finally:
        calling_filter.reset(token)


async def test_a_users_call_finds_only_what_that_user_may_read(tmp_path: Path) -> None:
    registry = await _registry(tmp_path)
    outsider = calling_reader.set(Reader(user="bob", groups=("sales",)))
    try:
        assert await _found(registry) == {"memo-finance", "memo-ops"}
        # no filter of the call's own reaches past the user's access, its readers' key included
        assert await _found(registry, filter={"team": "legal"}) == set()
        assert await _found(registry, filter={ACCESS_KEY: {"$exists": True}}) == set()
        assert await _found(registry, filter={"$not": {"team": "ops"}}) == {"memo-finance"}
    finally:
        calling_reader.reset(outsider)
    member = calling_reader.set(Reader(user="alice", groups=("legal",)))
    try:  # the spy: the legal memo is there for a member of the group
        assert await _found(registry, filter={"team": "legal"}) == {"memo-legal"}
    finally:
        calling_reader.reset(member)
