"""The orchestrator keeps the state it committed last: its next transition of that request
parses nothing, and a change by another replica in between is never overlooked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from contracts.queries import QuerySubmitted
from infra.runtime.redis_client import connect_redis
from infra.runtime.services import LocalService
from infra.settings import Settings
from orchestrator import store as store_module
from orchestrator.state import RequestState
from orchestrator.store import StateStore, Transition


@pytest.fixture
async def replicas(
    redis_service: LocalService, tmp_path: Path
) -> AsyncIterator[tuple[StateStore, StateStore]]:
    settings = Settings(redis_url=redis_service.url, data_dir=tmp_path)
    first, second = connect_redis(settings.redis_url), connect_redis(settings.redis_url)
    yield StateStore(first, settings), StateStore(second, settings)
    await first.aclose()
    await second.aclose()


def counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    parses: list[int] = []
    parse = RequestState.model_validate_json

    def counted(raw: Any, *args: Any, **kwargs: Any) -> RequestState:
        parses.append(1)
        return parse(raw, *args, **kwargs)

    monkeypatch.setattr(store_module.RequestState, "model_validate_json", counted)
    return parses


def renamed(query: str) -> Any:
    def decide(state: RequestState | None) -> Transition:
        assert state is not None
        state.query = query
        return Transition(state)

    return decide


async def test_the_next_transition_of_this_process_parses_nothing(
    replicas: tuple[StateStore, StateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = replicas
    await store.create(QuerySubmitted(request_id="cache-1", query="first"))
    await store.apply("cache-1", "e1", renamed("second"))
    parses = counting_parses(monkeypatch)
    seen: list[str] = []

    def look(state: RequestState | None) -> Transition:
        assert state is not None
        seen.append(state.query)
        return renamed("third")(state)

    await store.apply("cache-1", "e2", look)
    assert seen == ["second"] and parses == []
    monkeypatch.undo()
    final = await store.get("cache-1")
    assert final is not None and (final.query, final.version) == ("third", 2)


async def test_a_change_by_another_replica_is_read_before_deciding(
    replicas: tuple[StateStore, StateStore],
) -> None:
    mine, other = replicas
    await mine.create(QuerySubmitted(request_id="cache-2", query="first"))
    await mine.apply("cache-2", "e1", renamed("mine"))  # kept in `mine`'s memory as version 1
    await other.apply("cache-2", "e2", renamed("the other replica's"))  # version 2
    seen: list[str] = []

    def look(state: RequestState | None) -> Transition:
        assert state is not None
        seen.append(state.query)
        return renamed(state.query + ", then mine")(state)

    await mine.apply("cache-2", "e3", look)
    assert seen == ["the other replica's"]
    final = await other.get("cache-2")
    assert final is not None
    assert (final.query, final.version) == ("the other replica's, then mine", 3)


async def test_a_decision_that_fails_leaves_no_half_changed_state_behind(
    replicas: tuple[StateStore, StateStore],
) -> None:
    store, _ = replicas
    await store.create(QuerySubmitted(request_id="cache-3", query="first"))
    await store.apply("cache-3", "e1", renamed("kept"))

    def broken(state: RequestState | None) -> Transition:
        assert state is not None
        state.query = "half-changed"
        raise RuntimeError("a bug in the saga")

    with pytest.raises(RuntimeError):
        await store.apply("cache-3", "e2", broken)
    seen: list[str] = []

    def look(state: RequestState | None) -> Transition:
        assert state is not None
        seen.append(state.query)
        return Transition(None)

    await store.apply("cache-3", "e3", look)
    assert seen == ["kept"]
