"""Follow-ups made standalone by the LLM (when `RAGBUS_LLM_BASE_URL` is set).

The model reads the last turns and the new question and writes the question as someone
would ask it with no conversation before it. Only a session with earlier turns costs a call.
A failing model or an unusable reply leaves the rules' rewrite in place, and the
`query_rewrite` phase says which method made the question.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from contracts.queries import MAX_QUERY_CHARS
from contracts.sessions import SessionTurn
from infra.llm import LLMClient
from infra.llm_tasks import ask, parse_json_object

SHOWN_ANSWER_CHARS: Final = 400

SYSTEM_PROMPT: Final = """\
You rewrite the last question of a conversation so that it can be understood on its own.
Replace pronouns and references ("it", "she", "that one", "what about X?") by what they \
refer to in the earlier turns, and keep everything else as the user asked it. If the \
question is already standalone, return it unchanged. Do not answer it.
Reply with JSON only: {"standalone": "..."}"""


class RewriteUnusable(Exception):
    """The model's reply held no standalone question."""


def user_prompt(query: str, history: Sequence[SessionTurn]) -> str:
    lines = []
    for turn in history:
        lines.append(f"User: {turn.context_text}")
        if turn.answer:
            answer = " ".join(turn.answer.split())[:SHOWN_ANSWER_CHARS]
            lines.append(f"Assistant: {answer}")
    return "Conversation:\n" + "\n".join(lines) + f"\n\nLast question: {query.strip()}"


async def llm_rewrite(client: LLMClient, query: str, history: Sequence[SessionTurn]) -> str:
    completion = await ask(client, SYSTEM_PROMPT, user_prompt(query, history))
    parsed = parse_json_object(completion.content)
    standalone = parsed.get("standalone") if parsed else None
    if not isinstance(standalone, str) or not standalone.strip():
        raise RewriteUnusable(f"no standalone question in the reply: {completion.content[:200]!r}")
    return " ".join(standalone.split())[:MAX_QUERY_CHARS]
