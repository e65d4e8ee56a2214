"""The memory channel never cites the user's own words as evidence: not the question being
asked, not an earlier question of the session. An answer is remembered without its question
(embedded beside it, for recall), and what is recalled is cut of any line or sentence that is
one of the user's questions. A fact the user stated is still recalled, as what they said,
unless it is the question being asked. The worker runs on FastStream's TestNatsBroker with a
real redis-server and the embedded memory store; every memory of the scope is recalled
(`memory_min_score=-1`), so only the rule keeps a question out."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from contracts import subjects as sj
from contracts.commands import SearchCommand
from contracts.enums import Channel, Step
from contracts.results import SearchResult
from contracts.sessions import RememberTurn, SessionTurn
from engines.memory.recall import evidence, memorable, users_questions
from infra.memory.semantic import Memory, new_memory
from infra.memory.sessions import SessionStore
from infra.runtime.services import LocalService
from infra.settings import Settings
from tests.unit.conftest import WorkerHarness, worker_harness
from tests.unit.fakes import FakeEncoder
from workers.memory import create_router

QUESTION = "Who built the Lighthouse of Alexandria?"
ANSWER = "Sostratus of Cnidus built it [1]. It stood on the island of Pharos [2]."
FACT = "I am allergic to penicillin."


def turn(query: str, answer: str | None = None, standalone: str | None = None) -> SessionTurn:
    return SessionTurn(
        request_id=uuid.uuid4().hex,
        query=query,
        standalone_query=standalone,
        answer=answer,
        status="completed" if answer else "submitted",
        submitted_at=time.time(),
        finished_at=time.time() if answer else None,
    )


def test_an_answer_is_remembered_without_its_question() -> None:
    asked = turn("When was it built?", ANSWER, standalone="When was the Pharos lighthouse built?")
    memory = memorable(
        RememberTurn(request_id=asked.request_id, session_id="s", turn=asked, accepted=True)
    )
    assert memory is not None and memory.kind == "answer"
    assert memory.text == "Sostratus of Cnidus built it. It stood on the island of Pharos."
    assert "When" not in memory.text
    assert memory.question == "When was the Pharos lighthouse built?"
    assert memory.recall_text.startswith(memory.question)  # found by later questions


def test_evidence_leaves_out_every_line_or_sentence_the_user_asked() -> None:
    earlier = turn("What was the Colossus made of?", "Bronze.")
    current = turn("How tall was it?")
    asked = users_questions(
        "How tall was the Colossus of Rhodes?",
        current.request_id,
        [
            earlier,
            turn(FACT, "Noted."),  # a statement: remembered as a fact, not a question
            current,
        ],
    )
    # made before answers were kept apart from their question: "question\nanswer"
    legacy = Memory("m1", "answer", "What was the Colossus made of?\nIt was bronze.", "t", "r", 0.0)
    assert evidence(legacy, asked) == "It was bronze."
    quoted = new_memory("answer", "How tall was it? About 33 metres.", "t", "r", question="x")
    assert evidence(quoted, asked) == "About 33 metres."
    assert evidence(new_memory("answer", "how tall was it", "t", "r", question="x"), asked) == ""
    fact = new_memory("fact", FACT, "You said", "r")
    assert evidence(fact, asked) == FACT  # what the user stated stays recallable
    assert evidence(fact, users_questions(FACT, "now", [])) == ""  # unless it is the question


@pytest.fixture
def settings(tmp_path: Path, redis_service: LocalService) -> Settings:
    return Settings(data_dir=tmp_path, redis_url=redis_service.url, memory_min_score=-1.0)


async def remember(
    harness: WorkerHarness, session_id: str, finished: SessionTurn, accepted: bool
) -> None:
    command = RememberTurn(
        request_id=finished.request_id, session_id=session_id, turn=finished, accepted=accepted
    )
    await harness.publish(command, sj.cmd_subject(Step.MEMORY), sj.STREAM_CMD)


async def recall(
    harness: WorkerHarness,
    session_id: str,
    question: str,
    narrowed: dict[str, object] | None = None,
) -> list[str]:
    """Ask `question` in the session, as the saga would: its turn begun, then the channel."""
    asked = turn(question)
    store = SessionStore.from_settings(harness.resources.redis(), harness.resources.settings)
    await store.begin("default", session_id, asked)
    command = SearchCommand(
        request_id=asked.request_id,
        channel=Channel.MEMORY,
        query=question,
        namespaces=["default"],
        top_k=10,
        session_id=session_id,
        filter=narrowed,
    )
    await harness.publish(command, sj.cmd_subject(Step.SEARCH, Channel.MEMORY), sj.STREAM_CMD)
    results = [
        SearchResult.model_validate(body)
        for body in harness.messages(sj.res_subject(Step.SEARCH, Channel.MEMORY))
        if body["request_id"] == asked.request_id
    ]
    assert len(results) == 1 and results[0].status == "ok", results
    return [chunk.text or "" for chunk in results[0].chunks]


async def answered_then_stated(harness: WorkerHarness, session_id: str) -> None:
    """The session's first turns: QUESTION answered (ANSWER accepted), then FACT stated."""
    store = SessionStore.from_settings(harness.resources.redis(), harness.resources.settings)
    first = turn(QUESTION, ANSWER, standalone=QUESTION)
    await store.begin("default", session_id, first)
    await remember(harness, session_id, first, accepted=True)
    stated = turn(FACT, "Noted.", standalone=FACT)
    await store.begin("default", session_id, stated)
    await remember(harness, session_id, stated, accepted=False)


def cites(texts: list[str], words: str) -> bool:
    return any(words.lower().rstrip("?.") in text.lower() for text in texts)


async def test_a_question_is_never_cited_from_memory(settings: Settings) -> None:
    session_id = f"s-{uuid.uuid4().hex[:8]}"
    async with worker_harness(create_router, settings, FakeEncoder()) as harness:
        await answered_then_stated(harness, session_id)

        # the same question again: the earlier answer is recalled, never the question
        again = await recall(harness, session_id, QUESTION)
        assert cites(again, "Sostratus of Cnidus built it")
        assert not cites(again, QUESTION)
        assert cites(again, FACT)  # a statement is recalled as what the user said

        # another question: neither it nor any earlier one is cited
        follow_up = "Who built the lighthouse on Pharos island?"
        recalled = await recall(harness, session_id, follow_up)
        assert recalled and not cites(recalled, follow_up) and not cites(recalled, QUESTION)

        # the user says the fact again: their own words now are the question, never evidence
        repeated = await recall(harness, session_id, FACT)
        assert not cites(repeated, FACT)
        assert cites(repeated, "Sostratus of Cnidus built it")


async def test_a_filtered_request_recalls_only_what_the_user_stated(settings: Settings) -> None:
    # a remembered answer drew on documents the filter may leave out
    session_id = f"s-{uuid.uuid4().hex[:8]}"
    async with worker_harness(create_router, settings, FakeEncoder()) as harness:
        await answered_then_stated(harness, session_id)
        unfiltered = await recall(harness, session_id, "What about the lighthouse?")
        assert cites(unfiltered, "Sostratus of Cnidus built it") and cites(unfiltered, FACT)
        filtered = await recall(harness, session_id, "What about the lighthouse?", {"year": 2020})
        assert cites(filtered, FACT) and not cites(filtered, "Sostratus of Cnidus built it")
