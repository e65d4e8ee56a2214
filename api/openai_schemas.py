"""The OpenAI-compatible door's bodies (`api.openai_chat`): a chat completion's request and
answer, the model list and OpenAI's error object, as OpenAI's SDKs read them (a streamed
chunk is written where it is sent, `api.openai_chat._stream`).

A request keeps what OpenAI clients send: fields the answer has no use for (`temperature`,
`max_tokens`, `stop`, `seed`, `user`, `logprobs`, ...) are accepted and ignored, so a client
that sets them works; what would change what the answer means is stated in the schema and
refused with a 422 (`n` over 1, a `tool_choice` that forces a tool call, a `response_format`
other than text, an image or audio part), so no client is told it got what it did not.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from contracts.queries import MAX_QUERY_CHARS, SESSION_ID_PATTERN

DEFAULT_MODEL = "ragbus"
"""The model that searches the namespace `default`; `ragbus:<namespace>` searches another."""
MODEL_PREFIX = f"{DEFAULT_MODEL}:"

_TEXT_ONLY = "ragbus answers text questions from its documents: only text content parts are taken"


def _not_blank(text: str) -> str:
    """What the schema's `pattern: \\S` says (the question's own check: `QueryRequest`)."""
    if not text.strip():
        raise ValueError("must not be empty or whitespace only")
    return text


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class UserTextPart(BaseModel):
    type: Literal["text"]
    text: str = Field(
        max_length=MAX_QUERY_CHARS,
        json_schema_extra={"minLength": 1, "pattern": r"\S"},
        description="Not all white space; the parts of a message are joined by a newline.",
    )

    @field_validator("text")
    @classmethod
    def _said(cls, text: str) -> str:
        return _not_blank(text)


class RefusalPart(BaseModel):
    type: Literal["refusal"]
    refusal: str


def _text_parts_only(data: Any) -> Any:
    """An image, audio or file part is refused with a message that says why, not with the
    union's list of what every branch expected."""
    content = data.get("content") if isinstance(data, dict) else None
    if isinstance(content, list):
        for n, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if isinstance(kind, str) and kind not in ("text", "refusal"):
                raise ValueError(f"content[{n}] is of type {kind!r}: {_TEXT_ONLY}")
    return data


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str | None = Field(default=None, description="Ignored.")

    @model_validator(mode="before")
    @classmethod
    def _parts(cls, data: Any) -> Any:
        return _text_parts_only(data)


class SystemMessage(_Message):
    """Instructions: ignored (ragbus's answer is its documents' words, cited)."""

    role: Literal["system", "developer"]
    content: str | list[TextPart]


class UserMessage(_Message):
    """The last one is the question; earlier ones, with the assistant's answers after them,
    are the conversation it follows."""

    role: Literal["user"]
    content: (
        Annotated[
            str,
            Field(
                max_length=MAX_QUERY_CHARS,
                json_schema_extra={"minLength": 1, "pattern": r"\S"},
            ),
        ]
        | Annotated[list[UserTextPart], Field(min_length=1)]
    ) = Field(description="Text, 1-4000 characters, not all white space; or text parts.")

    @field_validator("content")
    @classmethod
    def _said(cls, content: str | list[UserTextPart]) -> str | list[UserTextPart]:
        if isinstance(content, str):
            _not_blank(content)
        return content


class AssistantMessage(_Message):
    role: Literal["assistant"]
    content: str | list[TextPart | RefusalPart] | None = None
    refusal: str | None = None
    tool_calls: list[dict[str, Any]] | None = Field(default=None, description="Ignored.")


class ToolMessage(_Message):
    """A tool's result in the client's own tool loop: ignored."""

    role: Literal["tool"]
    content: str | list[TextPart]
    tool_call_id: str


class FunctionMessage(_Message):
    """The deprecated form of a tool's result: ignored."""

    role: Literal["function"]
    content: str | None = None


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage | FunctionMessage,
    Field(discriminator="role"),
]


def text_of(content: str | list[Any] | None) -> str:
    """A message's text: the string, or its text parts joined by a newline."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part.text for part in content if isinstance(part, TextPart | UserTextPart))


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = Field(
        default=False,
        description="A last chunk before `[DONE]` with `usage` and no choices (estimated).",
    )


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"] = Field(description="Text only: ragbus's answer is prose, cited.")


class ChatCompletionRequest(BaseModel):
    """`POST /v1/chat/completions`, as OpenAI's API takes it. Fields not named here
    (`temperature`, `top_p`, `max_tokens`, `max_completion_tokens`, `stop`, `seed`,
    `presence_penalty`, `frequency_penalty`, `logit_bias`, `logprobs`, `top_logprobs`,
    `user`, `metadata`, `store`, `service_tier`, `parallel_tool_calls`, `reasoning_effort`,
    ...) are accepted and ignored: the answer is the documents' words, cited, whatever they
    say."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={
            "examples": [
                {
                    "model": "ragbus",
                    "messages": [{"role": "user", "content": "Who designed the Gatun Locks?"}],
                }
            ]
        },
    )

    model: str = Field(
        default=DEFAULT_MODEL,
        min_length=1,
        max_length=200,
        description="`ragbus` searches the namespace `default`, `ragbus:<namespace>` another "
        "(`GET /v1/models`); any other name is a 404 `model_not_found`.",
    )
    messages: list[Message] = Field(
        min_length=1,
        description="The conversation: the last `user` message is the question, the earlier "
        "user/assistant messages the turns it follows; system, developer, tool and function "
        "messages, and anything after the last user message, are ignored.",
        json_schema_extra={
            "contains": {
                "type": "object",
                "properties": {"role": {"const": "user"}},
                "required": ["role"],
            }
        },
    )
    stream: bool = Field(
        default=False,
        description="`chat.completion.chunk` server-sent events, then `data: [DONE]`.",
    )
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=None, ge=1, le=1, description="One answer a question.")
    tools: list[dict[str, Any]] | None = Field(
        default=None,
        description="Accepted and never called: the answer comes from the documents (a model "
        "may always answer without a tool under `tool_choice: auto`).",
    )
    tool_choice: Literal["none", "auto"] | None = Field(
        default=None, description="`required` or a named tool would be a promise not kept: 422."
    )
    function_call: Literal["none", "auto"] | None = Field(
        default=None, description="The deprecated `tool_choice`."
    )
    response_format: ResponseFormat | None = None
    modalities: list[Literal["text"]] | None = None
    session_id: str | None = Field(
        default=None,
        pattern=SESSION_ID_PATTERN,
        description="ragbus's own (an OpenAI SDK sends it with `extra_body`): the conversation "
        "as a session of the caller's (`GET /v1/sessions/{id}`); the turns of `messages` it "
        "lacks are added to it. Unset: a session of the request's own holds them.",
    )
    filter: dict[str, Any] | None = Field(
        default=None,
        description="ragbus's own (`extra_body`): only passages of documents whose metadata "
        'passes this filter (`{"year": {"$gte": 2020}}`; docs/usage.md, Filters).',
    )

    @field_validator("tool_choice", "function_call", mode="before")
    @classmethod
    def _no_forced_tool(cls, value: Any) -> Any:
        if value is None or value in ("none", "auto"):
            return value
        raise ValueError(
            "ragbus answers from its documents and never calls a client's tools: "
            "use 'auto' or 'none'"
        )

    @field_validator("response_format", mode="before")
    @classmethod
    def _text_format(cls, value: Any) -> Any:
        if isinstance(value, dict) and value.get("type") not in (None, "text"):
            raise ValueError(f"{value.get('type')!r}: ragbus answers in text only")
        return value

    @field_validator("messages")
    @classmethod
    def _a_question(cls, messages: list[Any]) -> list[Any]:
        if not any(isinstance(m, UserMessage) for m in messages):
            raise ValueError("no user message: the last user message is the question")
        return messages


class ChatMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str = Field(description="The answer, its sources cited as [n].")
    refusal: None = None


class Choice(BaseModel):
    index: int = 0
    message: ChatMessage
    logprobs: None = None
    finish_reason: Literal["stop"] = "stop"


class Usage(BaseModel):
    """Estimated: about four characters a token, of the messages' and the answer's text."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class SourceCitation(BaseModel):
    """ragbus's own: the source an `[n]` of the answer cites."""

    n: int = Field(ge=1)
    title: str = ""
    document_id: str
    source: str = ""
    page: int | None = None
    page_label: str = ""
    section: str = ""
    namespace: str = ""
    kind: Literal["document", "memory"] = "document"


class ChatCompletion(BaseModel):
    id: str = Field(
        description="The ragbus request id: `GET /v1/queries/{id}` (its trace id too) and "
        "`GET /v1/queries/{id}/events` follow it."
    )
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: None = None
    citations: list[SourceCitation] = Field(
        default_factory=list, description="ragbus's own: the sources, by their [n]."
    )


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default=0, description="Not known: 0.")
    owned_by: str = "ragbus"
    namespace: str = Field(description="ragbus's own: the namespace it searches.")
    documents: int | None = Field(
        default=None,
        description="ragbus's own: documents accepted through the API into it; null where "
        "none were (it may still hold some `ragbus ingest` put there on the bus).",
    )


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str = Field(
        description="`invalid_request_error` (4xx but 429), `rate_limit_error` (429) or "
        "`server_error` (5xx)."
    )
    param: str | None = Field(default=None, description="The field at fault, if one is.")
    code: str | None = Field(
        default=None,
        description="`invalid_api_key`, `model_not_found`, `invalid_value`, "
        "`missing_required_parameter`, `unsupported_value`, `rate_limit_exceeded`, "
        "`service_unavailable`, or a failed request's own error code.",
    )


class OpenAIErrorResponse(BaseModel):
    """Every error of the OpenAI-compatible routes, in OpenAI's shape."""

    error: OpenAIErrorDetail
