"""The OpenAI-compatible door: `POST /v1/chat/completions` and `GET /v1/models`, for Open
WebUI, LibreChat, LiteLLM and every OpenAI SDK.

A door translates and never decides (`api.asking`): each completion is one request on the bus,
asked through `Door.ask` with the caller's quota, trace and tenant exactly as `POST
/v1/queries` asks it, and followed through `Door.events`; its id is the completion's id.

- The last `user` message is the question, the messages before it the conversation, which
  becomes the turns of a session (`api.openai_conversation`).
- `model` chooses the namespace: `ragbus` is `default`, `ragbus:<namespace>` another; any
  other name is `model_not_found`.
- Streaming: a model's `token` events are content deltas as they come; an extractive answer,
  which arrives whole in the `answer` event, is sent a sentence (or twelve words) a chunk.
  When the answer is not what was streamed continued (a retry's new draft, a fallback, an
  invalid citation removed), the answer follows what was streamed after a rule (`---`).
- Errors are OpenAI's `{"error": {message, type, param, code}}`, on these routes only
  (`api.openai_errors`).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response
from pydantic import ValidationError
from sse_starlette import EventSourceResponse

from api.asking import Door, Followed
from api.auth import Caller, CallerDep
from api.idempotency import REPLAYED_HEADER, IdempotencyKey
from api.openai_conversation import Conversation, session_for
from api.openai_errors import ANSWER_ERRORS, ERRORS, OpenAIError, OpenAIRoute, translated
from api.openai_schemas import (
    DEFAULT_MODEL,
    MODEL_PREFIX,
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    Choice,
    ModelCard,
    ModelList,
    SourceCitation,
    Usage,
)
from api.schemas import QueryRequest
from api.sse import SSE_PING_S
from contracts.enums import RequestStatus
from contracts.events import AnswerData
from contracts.queries import MAX_CALLER_NAMESPACE_CHARS, NAMESPACE_PATTERN
from contracts.tenancy import caller_namespace
from infra.logging import get_logger
from infra.tenancy.quotas import Quotas

log = get_logger(__name__)

_NAMESPACE = re.compile(NAMESPACE_PATTERN)
RULE = "\n\n---\n\n"
"""Between a streamed draft and the answer that replaced it."""
MAX_WORDS = 12
"""Words of an extractive answer's sentence a chunk carries at most."""
_SENTENCE_END = re.compile(r"[.!?]+(?:\s*\[\d+\])*\s+")
_WORD_START = re.compile(r"(?<=\s)(?=\S)")


STREAM_DOC = (
    "The completion (`stream: false`), or with `stream: true` server-sent events: one "
    "`data: <chat.completion.chunk>` line each, the first with `delta.role`, the last with "
    "`finish_reason` and ragbus's `citations` (then a `usage` chunk with "
    "`stream_options.include_usage`), then `data: [DONE]`; a request that fails sends "
    '`data: {"error": {...}}` before `[DONE]`.'
)

router = APIRouter(prefix="/v1", route_class=OpenAIRoute, tags=["openai"])


# -- models -------------------------------------------------------------------------------


def namespace_of(model: str) -> str:
    """The namespace a model name searches, or 404 `model_not_found`."""
    if model == DEFAULT_MODEL:
        return "default"
    if model.startswith(MODEL_PREFIX):
        name = model.removeprefix(MODEL_PREFIX)
        if len(name) <= MAX_CALLER_NAMESPACE_CHARS and _NAMESPACE.fullmatch(name):
            return name
    raise OpenAIError(
        404,
        f"The model {model!r} does not exist: ragbus serves `ragbus` (the namespace "
        "`default`) and `ragbus:<namespace>`; GET /v1/models lists them",
        code="model_not_found",
        param="model",
    )


def model_name(namespace: str) -> str:
    return DEFAULT_MODEL if namespace == "default" else f"{MODEL_PREFIX}{namespace}"


async def _catalogue(request: Request, caller: Caller) -> dict[str, int]:
    """The caller's namespaces, by its names for them, with their documents."""
    spaces = await Quotas(request.app.state.redis).namespaces(caller.tenant)
    return {caller_namespace(caller.tenant, space): count for space, count in spaces.items()}


@router.get(
    "/models",
    response_model=ModelList,
    responses=ERRORS,
    summary="The models: `ragbus`, and `ragbus:<namespace>` for each of the caller's namespaces",
)
async def list_models(request: Request, caller: CallerDep) -> ModelList:
    """The namespaces the caller's catalogue knows (`GET /v1/namespaces`): those documents
    were sent to through the API. One that `ragbus ingest` filled on the bus is not listed,
    and is asked all the same by its name."""
    counts = await _catalogue(request, caller)
    names = ["default", *sorted(name for name in counts if name != "default")]
    return ModelList(
        data=[
            ModelCard(id=model_name(name), namespace=name, documents=counts.get(name))
            for name in names
        ]
    )


@router.get(
    "/models/{model}",
    response_model=ModelCard,
    responses=ERRORS,
    summary="A model: `ragbus` or `ragbus:<namespace>`",
)
async def get_model(
    model: Annotated[str, Path(description="`ragbus` or `ragbus:<namespace>`.")],
    request: Request,
    caller: CallerDep,
) -> ModelCard:
    name = namespace_of(model)
    counts = await _catalogue(request, caller)
    return ModelCard(id=model_name(name), namespace=name, documents=counts.get(name))


# -- the answer ---------------------------------------------------------------------------


def pieces(text: str) -> list[str]:
    """An answer that arrived whole, in chunks: a sentence each, its citations with it, and
    a long sentence twelve words at a time. Joined, they give `text` exactly."""
    out: list[str] = []
    start = 0
    for end in _SENTENCE_END.finditer(text):
        out += _words(text[start : end.end()])
        start = end.end()
    if start < len(text):
        out += _words(text[start:])
    return out


def _words(sentence: str) -> list[str]:
    words = _WORD_START.split(sentence)
    return ["".join(words[i : i + MAX_WORDS]) for i in range(0, len(words), MAX_WORDS)]


def citations_of(answer: AnswerData | None) -> list[SourceCitation]:
    if answer is None:
        return []
    return [
        SourceCitation(
            n=n,
            title=c.title,
            document_id=c.document_id,
            source=c.source,
            page=c.page,
            page_label=c.page_label,
            section=c.section,
            namespace=c.namespace,
            kind=c.kind,
        )
        for n, c in sorted(answer.citations.items())
    ]


def estimated_tokens(chars: int) -> int:
    """About four characters a token: what a client that counts usage needs, no more."""
    return math.ceil(chars / 4)


class Answering(Followed):
    """A request followed to its end (`Followed`): `deltas` gives its text as it should be
    streamed; then `answer`, `error` and `status` say how it ended."""

    def __init__(self, door: Door, caller: Caller, request_id: str) -> None:
        super().__init__(door, caller, request_id)
        self.streamed = ""
        self.diverged = False
        self.attempt = 1

    async def deltas(self) -> AsyncGenerator[str]:
        events = self.each()
        async with aclosing(events):
            async for event in events:
                if event.get("type") == "token":
                    text = self._token(event, event.get("data") or {})
                    if text:
                        yield text
        if self.completed and self.answer is not None:
            content = self.answer.content
            if content.startswith(self.streamed):
                rest = content[len(self.streamed) :]
            else:
                rest = RULE + content
            for piece in pieces(rest):
                yield piece

    def _token(self, event: dict[str, Any], data: dict[str, Any]) -> str:
        """A model's text: streamed while it continues one draft. A draft that starts again
        (its index back at 0 after text: a retry, a round after a tool) is not streamed: the
        answer follows the first draft at the end."""
        text = str(data.get("text") or "")
        attempt = int(event.get("attempt") or 1)
        if self.streamed and (data.get("index") == 0 or attempt != self.attempt):
            self.diverged = True
        self.attempt = attempt
        if self.diverged or not text:
            return ""
        self.streamed += text
        return text

    @property
    def completed(self) -> bool:
        return self.status == RequestStatus.COMPLETED.value

    def failure(self) -> OpenAIError:
        """What a request that did not complete answers (`x-should-retry: false`: it ran; a
        new request is the caller's decision, and its charge)."""
        code = self.error.code if self.error is not None else (self.status or "failed")
        why = self.error.message if self.error is not None else f"it ended {self.status}"
        timed_out = self.status == RequestStatus.TIMED_OUT.value
        return OpenAIError(
            504 if timed_out else 500,
            f"request {self.request_id} did not complete ({self.status}): {why}",
            code=code,
            headers={"x-request-id": self.request_id, "x-should-retry": "false"},
        )


# -- the route ----------------------------------------------------------------------------


@router.post(
    "/chat/completions",
    response_model=ChatCompletion,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": STREAM_DOC},
        **ANSWER_ERRORS,
    },
    summary="OpenAI's chat completions: the last user message asked as a question",
)
async def chat_completions(
    body: ChatCompletionRequest,
    request: Request,
    response: Response,
    caller: CallerDep,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """One request on the bus, as `POST /v1/queries` makes it; its id is the completion's
    (`x-request-id` too). With an `Idempotency-Key` seen before, the earlier request's answer."""
    namespace = namespace_of(body.model)
    conversation = Conversation.of(body)
    query = _query(conversation.question, namespace, body.filter)
    door = Door.of(request.app.state)
    await door.take_quota(caller, query)  # before the conversation's turns are written
    session_id = await session_for(door, caller, body, conversation, idempotency_key)
    query = query.model_copy(update={"session_id": session_id})
    submitted, replayed = await door.submit(caller, query, idempotency_key)
    rid = submitted.request_id
    headers = {"x-request-id": rid}
    if replayed:
        headers[REPLAYED_HEADER] = "true"
    answering = Answering(door, caller, rid)
    log.info("openai_chat", request_id=rid, stream=body.stream, session=session_id is not None)
    if body.stream:
        usage = body.stream_options is not None and body.stream_options.include_usage
        stream = _stream(answering, body.model, conversation, usage)
        return EventSourceResponse(stream, ping=SSE_PING_S, sep="\n", headers=headers)
    async for _ in answering.deltas():
        pass
    if not answering.completed or answering.answer is None:
        raise answering.failure()
    response.headers.update(headers)
    content = answering.answer.content
    return ChatCompletion(
        id=rid,
        created=int(time.time()),
        model=body.model,
        choices=[Choice(message=ChatMessage(content=content))],
        usage=_usage(conversation, len(content)),
        citations=citations_of(answering.answer),
    )


def _query(question: str, namespace: str, narrowed: dict[str, Any] | None) -> QueryRequest:
    """The question as `POST /v1/queries` takes it, or 422 for the messages or the filter."""
    try:
        return QueryRequest(query=question, namespaces=[namespace], filter=narrowed)
    except ValidationError as exc:
        errors = exc.errors()
        why = "; ".join(str(e.get("msg")).removeprefix("Value error, ") for e in errors)
        if any(e.get("loc", ("",))[0] == "filter" for e in errors):
            raise OpenAIError(
                422, f"the filter: {why}", code="invalid_value", param="filter"
            ) from exc
        raise OpenAIError(
            422,
            f"the question (the last user message): {why}",
            code="invalid_value",
            param="messages",
        ) from exc


def _usage(conversation: Conversation, answer_chars: int) -> Usage:
    prompt = estimated_tokens(conversation.prompt_chars)
    completion = estimated_tokens(answer_chars)
    return Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )


async def _stream(
    answering: Answering, model: str, conversation: Conversation, usage: bool
) -> AsyncIterator[bytes]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        body: dict[str, Any] = {
            "id": answering.request_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if usage:
            body["usage"] = None
        body.update(extra)
        return _data(body)

    yield chunk({"role": "assistant", "content": ""})
    sent = 0
    failure: OpenAIError | None = None
    try:
        async with aclosing(answering.deltas()) as deltas:
            async for text in deltas:
                sent += len(text)
                yield chunk({"content": text})
    except Exception as exc:  # Redis or the bus went away mid-answer: said, not a cut stream
        failure = translated(exc)
        if failure is None:
            log.exception("openai_stream_failed", request_id=answering.request_id)
            failure = OpenAIError(500, f"request {answering.request_id}: {exc}", code="internal")
    if failure is None and (not answering.completed or answering.answer is None):
        failure = answering.failure()
    if failure is not None:
        yield _data({"error": failure.detail().model_dump()})
    else:
        assert answering.answer is not None
        cited = [c.model_dump() for c in citations_of(answering.answer)]
        yield chunk({}, "stop", citations=cited)
        if usage:  # of the text the client was sent
            counted = _usage(conversation, sent)
            yield _data(
                {
                    "id": answering.request_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "system_fingerprint": None,
                    "choices": [],
                    "usage": counted.model_dump(),
                }
            )
    yield b"data: [DONE]\n\n"


def _data(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"
