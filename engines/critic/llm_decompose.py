"""Follow-up queries written by the LLM (when `RAGBUS_LLM_BASE_URL` is set).

The bridge heuristic (`decompose.py`) decides *whether* to decompose and proposes follow-ups
from named entities; a model reads the question and the passages and can say what is still
missing in words no pattern finds ("Judith Viorst university attended" where the passage
names her only as "the author"). It is asked only once the critic has chosen to decompose,
so an accepted answer costs no extra call. An unusable reply or a failing model leaves the
heuristic follow-ups in place; the critic's phase says which planner was used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from contracts.models import RetrievedChunk
from contracts.queries import MAX_QUERY_CHARS
from engines.critic.decompose import MAX_FOLLOW_UPS
from infra.llm import LLMClient
from infra.llm_tasks import ask, parse_json_object

SHOWN_PASSAGES: Final = 3
MAX_PASSAGE_CHARS: Final = 700

SYSTEM_PROMPT: Final = f"""\
You plan follow-up searches for a question that takes several hops to answer.
You are given the question and the passages found so far. Work out which facts the passages \
do not give yet, and write at most {MAX_FOLLOW_UPS} short search queries for them. Name the \
entities the passages revealed instead of describing them (the author's name, not "the \
author"). Reply with JSON only: {{"queries": ["...", "..."]}}; {{"queries": []}} when the \
passages already answer the question."""


class PlanUnusable(Exception):
    """The model's reply held no list of queries."""


def user_prompt(query: str, contexts: Sequence[RetrievedChunk]) -> str:
    passages = "\n".join(
        f"[{n}] {chunk.title + ': ' if chunk.title else ''}{chunk.text[:MAX_PASSAGE_CHARS]}"
        for n, chunk in enumerate(contexts[:SHOWN_PASSAGES], start=1)
    )
    return f"Passages:\n{passages or '(none)'}\n\nQuestion: {query.strip()}"


async def llm_sub_queries(
    client: LLMClient, query: str, contexts: Sequence[RetrievedChunk]
) -> list[str]:
    """At most `MAX_FOLLOW_UPS` distinct follow-up queries; raises `PlanUnusable` when the
    reply has none to parse (an explicit empty list is an answer: no follow-up needed)."""
    completion = await ask(client, SYSTEM_PROMPT, user_prompt(query, contexts))
    parsed = parse_json_object(completion.content)
    queries = parsed.get("queries") if parsed else None
    if not isinstance(queries, list):
        raise PlanUnusable(f"no query list in the reply: {completion.content[:200]!r}")
    cleaned = (" ".join(str(q).split())[:MAX_QUERY_CHARS] for q in queries if isinstance(q, str))
    return list(dict.fromkeys(q for q in cleaned if q))[:MAX_FOLLOW_UPS]


RESEARCH_PROMPT: Final = """\
You plan the research of a broad question. Split it into at most {limit} sub-questions that \
can each be answered from a few passages, and that together answer it: its parts, the \
entities it names, and the facts the passages below show are needed. Start with the question \
itself if it can be answered directly. Reply with JSON only: {{"questions": ["...", "..."]}}"""


async def llm_plan(
    client: LLMClient, query: str, contexts: Sequence[RetrievedChunk], limit: int
) -> list[str]:
    """At most `limit` distinct sub-questions of a research request; [] when the reply has
    none (the rules' plan is used then)."""
    system = RESEARCH_PROMPT.format(limit=limit)
    completion = await ask(client, system, user_prompt(query, contexts))
    parsed = parse_json_object(completion.content)
    questions = parsed.get("questions") if parsed else None
    if not isinstance(questions, list):
        return []
    cleaned = (" ".join(str(q).split())[:MAX_QUERY_CHARS] for q in questions if isinstance(q, str))
    return list(dict.fromkeys(q for q in cleaned if q))[:limit]
