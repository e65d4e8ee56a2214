"""A streaming chat client for any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, LM Studio…).

Built on the official `openai` SDK (`AsyncOpenAI` with `base_url`/`api_key`, `stream=True`).
Content deltas are handed to a callback the moment they arrive; tool-call deltas
(`index`, `id`, `function.name`, `function.arguments` fragments) are accumulated into
whole calls. Transient failures — connection errors, timeouts, 408/409/429 and 5xx —
are retried with exponential back-off (tenacity) only while nothing has been forwarded:
once a token has gone to the caller, a broken stream is reported as `LLMStreamBroken`
and never replayed, so nobody sees half an answer twice.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from infra.logging import get_logger

if TYPE_CHECKING:
    from infra.settings import Settings

log = get_logger(__name__)

TokenSink = Callable[[str], Awaitable[None]]
NO_KEY = "not-needed"
"""Local servers (vLLM, Ollama) take any key; the SDK insists on one."""


class LLMError(Exception):
    """The model could not give an answer; `retryable` says whether trying again may help."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class LLMStreamBroken(LLMError):
    """The stream failed after tokens were forwarded: not retried (no replayed half answers)."""

    def __init__(self, message: str, tokens: int) -> None:
        super().__init__(message, retryable=False)
        self.tokens = tokens


@dataclass
class LLMToolCall:
    id: str
    name: str
    arguments: str
    """The raw JSON text the model produced; parsing it is the caller's business."""


@dataclass
class Completion:
    content: str
    tool_calls: list[LLMToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    model: str = ""
    attempts: int = 1
    tokens: int = 0
    """Content deltas forwarded to the sink."""


def _openai() -> Any:
    """The `openai` SDK where a client was made (its errors exist only then), else None: the
    SDK takes most of a second to import, and a process with no LLM configured never needs it."""
    return sys.modules.get("openai")


def is_transient(exc: BaseException) -> bool:
    """Worth another try: the server was unreachable, slow, overloaded or failed itself."""
    if isinstance(exc, LLMStreamBroken):
        return False
    if isinstance(exc, LLMError):
        return exc.retryable
    if sdk := _openai():
        if isinstance(exc, sdk.APIConnectionError):  # APITimeoutError is one of these
            return True
        if isinstance(exc, sdk.APIStatusError):
            return bool(exc.status_code in (408, 409, 429) or exc.status_code >= 500)
    return isinstance(exc, TimeoutError | ConnectionError)


def describe(exc: BaseException) -> str:
    if sdk := _openai():
        if isinstance(exc, sdk.APIStatusError):
            return f"HTTP {exc.status_code} from the model server"
        if isinstance(exc, sdk.APITimeoutError):
            return "the model server did not answer in time"
        if isinstance(exc, sdk.APIConnectionError):
            return "the model server could not be reached"
    if isinstance(exc, TimeoutError):
        return "the model server did not answer in time"
    return str(exc) or type(exc).__name__


@dataclass
class _Partial:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class LLMClient:
    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        temperature: float = 0.1,
        max_tokens: int = 1024,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.temperature = temperature
        self.max_tokens = max_tokens
        import openai

        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or NO_KEY,
            timeout=timeout_s,
            max_retries=0,  # retries are ours: only before the first token
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMClient:
        if not settings.llm_base_url:
            raise ValueError("RAGBUS_LLM_BASE_URL is not set")
        return cls(
            base_url=settings.llm_base_url,
            model=settings.llm_model,
            api_key=settings.llm_api_key,
            timeout_s=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
            backoff_s=settings.llm_retry_backoff_s,
            temperature=settings.llm_temperature,
            max_tokens=settings.llm_max_tokens,
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def stream_chat(
        self,
        messages: list[dict[str, Any]],
        *,
        on_token: TokenSink,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion:
        """One chat completion, streamed; retried with back-off until a token is forwarded."""
        attempts = 0

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                "llm_retry",
                attempt=state.attempt_number,
                error=describe(exc) if exc else None,
                model=self.model,
            )

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_exponential(multiplier=self.backoff_s, max=10),
            retry=retry_if_exception(is_transient),
            before_sleep=before_sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                attempts += 1
                completion = await self._stream_once(messages, tools, on_token)
                completion.attempts = attempts
                return completion
        raise AssertionError("unreachable")  # pragma: no cover

    async def _stream_once(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        on_token: TokenSink,
    ) -> Completion:
        forwarded = 0
        content: list[str] = []
        partials: dict[int, _Partial] = {}
        finish_reason: str | None = None
        model = self.model
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if tools:
            kwargs["tools"] = tools
        try:
            stream = await asyncio.wait_for(
                self._client.chat.completions.create(**kwargs), self.timeout_s
            )
            iterator = stream.__aiter__()
            while True:
                try:
                    chunk = await asyncio.wait_for(iterator.__anext__(), self.timeout_s)
                except StopAsyncIteration:
                    break
                model = getattr(chunk, "model", None) or model
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                delta = choice.delta
                if delta is not None:
                    for piece in delta.tool_calls or []:
                        partial = partials.setdefault(piece.index or 0, _Partial())
                        if piece.id:
                            partial.id = piece.id
                        if piece.function is not None:
                            if piece.function.name:
                                partial.name += piece.function.name
                            if piece.function.arguments:
                                partial.arguments.append(piece.function.arguments)
                    if delta.content:
                        content.append(delta.content)
                        await on_token(delta.content)
                        forwarded += 1
                if choice.finish_reason:
                    finish_reason = choice.finish_reason
        except Exception as exc:
            if forwarded:
                raise LLMStreamBroken(
                    f"the stream broke after {forwarded} tokens: {describe(exc)}", forwarded
                ) from exc
            raise
        calls = [
            LLMToolCall(id=p.id or f"call_{index}", name=p.name, arguments="".join(p.arguments))
            for index, p in sorted(partials.items())
        ]
        return Completion(
            content="".join(content),
            tool_calls=calls,
            finish_reason=finish_reason,
            model=model,
            tokens=forwarded,
        )
