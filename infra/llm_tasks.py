"""Small, non-streamed LLM tasks over `infra.llm.LLMClient`: ask, read the whole reply, parse it.

Ingestion-side uses of the model (entity extraction, community summaries) forward nothing to
a caller, so a stream that breaks half-way is simply asked again — within the same retry
budget (`RAGBUS_LLM_MAX_RETRIES`, back-off `RAGBUS_LLM_RETRY_BACKOFF_S`) and timeouts the
client already applies to everything else.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from infra.llm import Completion, LLMClient, LLMStreamBroken, describe
from infra.logging import get_logger

log = get_logger(__name__)

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


async def _discard(_: str) -> None:
    return None


async def ask(client: LLMClient, system: str, user: str) -> Completion:
    """One chat completion, read to the end. Transient errors before the first token are
    retried by the client; a stream broken after it is retried here (nothing was shown to
    anyone), up to the same number of retries."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    broken = 0
    while True:
        try:
            return await client.stream_chat(messages, on_token=_discard)
        except LLMStreamBroken as exc:
            broken += 1
            if broken > client.max_retries:
                raise
            log.warning("llm_task_stream_retry", attempt=broken, error=describe(exc))
            await asyncio.sleep(client.backoff_s * 2 ** (broken - 1))


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The JSON object in a model's reply, tolerating a Markdown fence or chatter around it;
    None when there is none."""
    candidates = [match.group(1) for match in _FENCE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    candidates.append(text)
    for candidate in candidates:
        try:
            parsed = json.loads(candidate.strip())
        except ValueError:
            continue
        if isinstance(parsed, dict):
            return parsed
    return None
