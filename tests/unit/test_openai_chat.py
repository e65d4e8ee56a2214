"""The OpenAI-compatible door's parts without a bus: the conversation it reads from the
messages, the session turns it writes (on a real redis-server), how it chunks and follows an
answer, and its errors in OpenAI's shape while the rest of the API keeps its own."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
from fastapi.testclient import TestClient

from api.app import create_app
from api.asking import Door
from api.auth import Caller
from api.openai_chat import RULE, Answering, _stream, namespace_of, pieces
from api.openai_conversation import Conversation, Pair, _placed, seed, session_for
from api.openai_errors import OpenAIError
from api.openai_schemas import ChatCompletionRequest
from contracts.enums import RequestStatus
from contracts.events import AnswerData, ErrorData
from contracts.sessions import SessionTurn
from infra.memory.sessions import SessionStore
from infra.runtime.services import LocalService
from infra.settings import Settings
from infra.tenancy.quotas import effective
from orchestrator.state import RequestState

CALLER = Caller("default", effective(Settings()))
ANSWER = (
    "The Lighthouse of Alexandria was built on the island of Pharos by Sostratus of Cnidus "
    "[1]. Earthquakes between 956 and 1323 AD damaged it [2]. Its stones were reused."
)


def request(*messages: dict[str, Any], **fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": list(messages), **fields})


def user(text: Any) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


# -- the conversation ---------------------------------------------------------------------


def test_the_last_user_message_is_the_question_and_the_pairs_before_it_the_turns() -> None:
    conversation = Conversation.of(
        request(
            {"role": "system", "content": "You are terse."},
            assistant("Hello! Ask me anything."),  # before any question: nothing it answers
            user("Who built the lighthouse?"),
            assistant([{"type": "text", "text": "Sostratus [1]."}]),
            assistant("More: it was on Pharos."),
            user([{"type": "text", "text": "When"}, {"type": "text", "text": "was it damaged?"}]),
            {"role": "tool", "content": "ignored", "tool_call_id": "t1"},
            user("  And why?  "),
            assistant("(a prefill after the question is ignored)"),
        )
    )
    assert conversation.question == "  And why?  "
    assert conversation.pairs == [
        Pair("Who built the lighthouse?", "Sostratus [1].\n\nMore: it was on Pharos."),
        Pair("When\nwas it damaged?", None),
    ]
    assert conversation.prompt_chars > len("You are terse.")


def test_models_name_namespaces_and_nothing_else() -> None:
    assert namespace_of("ragbus") == "default"
    assert namespace_of("ragbus:default") == "default"
    assert namespace_of("ragbus:team-notes") == "team-notes"
    for unknown in ("gpt-4o", "ragbus:", "ragbus:Bad Name", "ragbus:a__b", "team-notes"):
        with pytest.raises(OpenAIError) as refused:
            namespace_of(unknown)
        assert (refused.value.status_code, refused.value.code) == (404, "model_not_found")


def test_turns_without_a_time_are_placed_between_their_neighbours() -> None:
    assert _placed([None, None], 100.0) == pytest.approx([99.998, 99.999])
    placed = _placed([None, 10.0, None, None, 13.0, None], 20.0)
    assert placed == pytest.approx([9.999, 10.0, 11.0, 12.0, 13.0, 16.5])
    assert placed == sorted(placed)


@pytest.fixture
async def sessions(redis_service: LocalService) -> AsyncIterator[SessionStore]:
    redis = aioredis.from_url(redis_service.url, decode_responses=True)
    await redis.flushdb()
    yield SessionStore(redis, max_turns=50, ttl_s=3600)
    await redis.aclose()


async def test_the_pairs_become_finished_turns_once(sessions: SessionStore) -> None:
    pairs = [Pair("Who built the lighthouse?", "Sostratus [1]."), Pair("Why?", None)]
    assert await seed(sessions, "acme", "s1", pairs) == 2
    assert await seed(sessions, "acme", "s1", pairs) == 0  # again: nothing new
    turns = await sessions.turns("acme", "s1")
    assert [(t.query, t.answer, t.status) for t in turns] == [
        ("Who built the lighthouse?", "Sostratus [1].", "completed"),
        ("Why?", None, "completed"),
    ]
    assert all(t.finished and t.request_id.startswith("oai-") for t in turns)
    assert turns[-1].submitted_at < time.time()
    assert await sessions.turns("beta", "s1") == []  # per tenant


async def test_a_named_session_gains_the_turns_it_lacks_in_their_place(
    sessions: SessionStore,
) -> None:
    asked = SessionTurn(
        request_id="real-2", query="Who  completed the Colossus?", submitted_at=time.time() - 60
    )
    await sessions.begin("default", "chat", asked)
    pairs = [
        Pair("Who built the lighthouse?", "Sostratus."),
        Pair("Who completed the Colossus?", "Chares."),
        Pair("When?", "280 BC."),
    ]
    assert await seed(sessions, "default", "chat", pairs) == 2
    turns = await sessions.turns("default", "chat")
    assert [t.query for t in turns] == [
        "Who built the lighthouse?",
        "Who  completed the Colossus?",  # the session's own, kept as it was
        "When?",
    ]
    assert turns[1].request_id == "real-2"


async def test_the_session_is_the_callers_or_one_of_the_requests_own(
    sessions: SessionStore,
) -> None:
    door = cast(Door, SimpleNamespace(settings=Settings(), redis=sessions.redis))
    first = request(user("Who built the lighthouse?"))
    assert await session_for(door, CALLER, first, Conversation.of(first), None) is None
    named = request(user("Who built the lighthouse?"), session_id="mine")
    assert await session_for(door, CALLER, named, Conversation.of(named), None) == "mine"

    follow = request(user("Who built the lighthouse?"), assistant("Sostratus."), user("When?"))
    conversation = Conversation.of(follow)
    one = await session_for(door, CALLER, follow, conversation, None)
    two = await session_for(door, CALLER, follow, conversation, None)
    assert one and two and one != two and one.startswith("oai-")  # a regenerate: its own
    keyed = await session_for(door, CALLER, follow, conversation, "key-1")
    assert keyed == await session_for(door, CALLER, follow, conversation, "key-1")
    assert keyed != await session_for(door, CALLER, follow, conversation, "key-2")
    assert [t.query for t in await sessions.turns("default", str(keyed))] == [
        "Who built the lighthouse?"
    ]

    none_kept = cast(
        Door, SimpleNamespace(settings=Settings(session_context_turns=0), redis=sessions.redis)
    )
    assert await session_for(none_kept, CALLER, follow, conversation, None) is None


# -- the answer ---------------------------------------------------------------------------


def test_an_answer_that_arrived_whole_is_sent_a_sentence_at_a_time() -> None:
    sent = pieces(ANSWER)
    assert "".join(sent) == ANSWER
    assert sent[1] == "Sostratus of Cnidus [1]. "  # a long sentence: twelve words at a time
    assert sent[2] == "Earthquakes between 956 and 1323 AD damaged it [2]. "
    assert len(sent) == 4
    for text in ("", "One", "  spaced   words  ", "Is 3.5 km long? Yes!"):
        assert "".join(pieces(text)) == text


class FakeDoor:
    def __init__(self, events: list[dict[str, Any]], state: RequestState | None = None) -> None:
        self.events_sent = events
        self.record = state

    async def events(self, caller: Caller, request_id: str) -> AsyncGenerator[dict[str, Any]]:
        for event in self.events_sent:
            yield event

    async def state(self, caller: Caller, request_id: str) -> RequestState:
        assert self.record is not None
        return self.record


def answered(content: str, status: str = "completed") -> list[dict[str, Any]]:
    cited = {"1": {"chunk_id": "c1", "document_id": "lighthouse", "title": "The Lighthouse"}}
    return [
        {"type": "answer", "data": {"content": content, "citations": cited}},
        {"type": "done", "data": {"status": status}},
    ]


def token(text: str, index: int, attempt: int = 1) -> dict[str, Any]:
    return {"type": "token", "attempt": attempt, "data": {"text": text, "index": index}}


async def follow(
    events: list[dict[str, Any]], state: RequestState | None = None
) -> tuple[Answering, list[str]]:
    """The request followed to its end, and the deltas it gave."""
    answering = Answering(cast(Door, FakeDoor(events, state)), CALLER, "r1")
    return answering, [text async for text in answering.deltas()]


async def test_an_extractive_answer_is_streamed_in_pieces() -> None:
    got, texts = await follow([{"type": "phase", "data": {}}, *answered(ANSWER)])
    assert texts == pieces(ANSWER)
    assert got.completed and got.answer is not None and got.answer.content == ANSWER


async def test_a_models_tokens_are_the_deltas_and_the_answer_adds_only_what_is_missing() -> None:
    events = [token("The Lighthouse was built ", 0), token("by Sostratus", 1)]
    _, texts = await follow([*events, *answered("The Lighthouse was built by Sostratus [1].")])
    assert texts == ["The Lighthouse was built ", "by Sostratus", " [1]."]


async def test_an_answer_that_replaced_the_streamed_draft_follows_it_after_a_rule() -> None:
    retry = [token("A first draft ", 0), token("on Mars [9].", 1), token("Second ", 0, 2)]
    _, texts = await follow([*retry, *answered("Second draft [1].")])
    assert texts[:2] == ["A first draft ", "on Mars [9]."]  # the new draft is not streamed
    assert "".join(texts[2:]) == RULE + "Second draft [1]."


async def test_a_request_that_failed_is_a_server_error_that_should_not_be_retried() -> None:
    failed = [
        {"type": "error", "data": {"code": "generation_failed", "message": "no model"}},
        {"type": "done", "data": {"status": "failed"}},
    ]
    got, texts = await follow(failed)
    assert texts == [] and not got.completed
    failure = got.failure()
    assert (failure.status_code, failure.code) == (500, "generation_failed")
    assert failure.headers == {"x-request-id": "r1", "x-should-retry": "false"}
    timed_out, _ = await follow([{"type": "done", "data": {"status": "timed_out"}}], _state())
    assert timed_out.failure().status_code == 504


def _state(**fields: Any) -> RequestState:
    values: dict[str, Any] = {
        "request_id": "r1",
        "query": "q",
        "search_queries": ["q"],
        "namespaces": ["default"],
        "top_k": 5,
        "channel_top_k": 20,
        "deadline_at": time.time(),
        "status": RequestStatus.TIMED_OUT,
    }
    return RequestState(**{**values, **fields})


async def test_a_request_whose_events_expired_is_read_from_its_record() -> None:
    record = _state(status=RequestStatus.COMPLETED, answer=AnswerData(content="Kept [1]."))
    _, texts = await follow([{"type": "done", "data": {"status": "completed"}}], record)
    assert texts == ["Kept [1]."]
    failed = _state(status=RequestStatus.FAILED, error=ErrorData(code="boom", message="x"))
    got, _ = await follow([], failed)
    assert got.failure().code == "boom"


async def _lines(events: list[dict[str, Any]], usage: bool) -> list[Any]:
    answering = Answering(cast(Door, FakeDoor(events)), CALLER, "r1")
    conversation = Conversation.of(request(user("Who built it?")))
    raw = b"".join([part async for part in _stream(answering, "ragbus", conversation, usage)])
    blocks = raw.decode().split("\n\n")
    assert blocks[-1] == "" and blocks[-2] == "data: [DONE]"
    assert all(block.startswith("data: ") for block in blocks[:-1])
    return [json.loads(block.removeprefix("data: ")) for block in blocks[:-2]]


async def test_a_stream_is_openais_chunks_with_the_sources_at_the_end() -> None:
    chunks = await _lines(answered(ANSWER), usage=True)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "r1" for c in chunks)
    texts = [c["choices"][0]["delta"].get("content") for c in chunks[1:-2]]
    assert "".join(texts) == ANSWER and len(texts) == 4
    last = chunks[-2]
    assert last["choices"][0]["finish_reason"] == "stop"
    assert last["citations"][0]["n"] == 1
    assert last["citations"][0]["document_id"] == "lighthouse"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert all(c["usage"] is None for c in chunks[:-1])


async def test_a_stream_whose_request_failed_ends_with_an_error_then_done() -> None:
    failed = [
        {"type": "error", "data": {"code": "cancelled", "message": "cancelled by the caller"}},
        {"type": "done", "data": {"status": "cancelled"}},
    ]
    chunks = await _lines(failed, usage=False)
    assert "usage" not in chunks[0]
    error = chunks[-1]["error"]
    assert error["type"] == "server_error" and error["code"] == "cancelled"
    assert "r1" in error["message"]


# -- errors in OpenAI's shape, on these routes only ---------------------------------------


@pytest.fixture
def client() -> TestClient:
    app = create_app(Settings(api_token="tok", auth_failure_limit=0))
    app.state.redis = None  # no lifespan: what the routes below reach before any connection
    app.state.store = None
    return TestClient(app, headers={"Authorization": "Bearer tok"})


def openai_error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


QUESTION = [user("Who built the lighthouse?")]


def test_errors_of_the_openai_routes_are_openais(client: TestClient) -> None:
    post = "/v1/chat/completions"
    error = openai_error(client.post(post, json={"model": "gpt-4o", "messages": QUESTION}), 404)
    assert (error["code"], error["param"], error["type"]) == (
        "model_not_found",
        "model",
        "invalid_request_error",
    )
    wrong = client.post(post, json={"messages": QUESTION}, headers={"Authorization": "Bearer x"})
    assert openai_error(wrong, 401)["code"] == "invalid_api_key"
    assert wrong.headers["WWW-Authenticate"] == "Bearer"
    assert openai_error(client.get("/v1/models/gpt-4o"), 404)["code"] == "model_not_found"

    for body, param in (
        ({"messages": QUESTION, "n": 2}, "n"),
        ({"messages": QUESTION, "tool_choice": "required"}, "tool_choice"),
        ({"messages": QUESTION, "response_format": {"type": "json_object"}}, "response_format"),
        ({"messages": [assistant("Hi.")]}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [user("   ")]}, "messages[0].content"),
        ({"messages": [user("x" * 2500), user("y")], "stream": "maybe"}, "stream"),
    ):
        error = openai_error(client.post(post, json=body), 422)
        assert error["param"] == param, error
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    error = openai_error(client.post(post, json={"messages": [user([image])]}), 422)
    assert "image_url" in error["message"] and "text" in error["message"]
    long = [user([{"type": "text", "text": "x" * 3000}, {"type": "text", "text": "y" * 3000}])]
    error = openai_error(client.post(post, json={"messages": long}), 422)
    assert error["param"] == "messages" and "4000" in error["message"]
    bad = client.post(post, content=b"{not json", headers={"content-type": "application/json"})
    assert openai_error(bad, 422)["code"] == "invalid_json"


def test_the_rest_of_the_api_keeps_its_own_error_shape(client: TestClient) -> None:
    error = client.get("/v1/whoami", headers={"Authorization": "Bearer x"}).json()["error"]
    assert error["code"] == "unauthorized" and "type" not in error
    error = client.get("/v1/queries/not!an!id").json()["error"]
    assert error["code"] == "validation_error" and error["field"] == "request_id"


def test_the_openapi_document_declares_both_answers_and_openais_errors() -> None:
    spec = create_app(Settings()).openapi()
    post = spec["paths"]["/v1/chat/completions"]["post"]
    ok = post["responses"]["200"]["content"]
    assert set(ok) == {"application/json", "text/event-stream"}
    assert ok["application/json"]["schema"]["$ref"].endswith("/ChatCompletion")
    for code in ("401", "404", "422", "429", "500", "503"):
        schema = post["responses"][code]["content"]["application/json"]["schema"]
        assert schema["$ref"].endswith("/OpenAIErrorResponse"), code
    messages = spec["components"]["schemas"]["ChatCompletionRequest"]["properties"]["messages"]
    assert messages["contains"]["properties"]["role"] == {"const": "user"}
    assert set(spec["paths"]["/v1/models"]["get"]["responses"]) >= {"200", "401"}
