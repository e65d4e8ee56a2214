"""A research request's plan: its sub-questions, by the model when one is configured and it
answers with some (`engines.critic.llm_decompose.llm_plan`), else by the rules (its facets,
entities and bridges: `engines.critic.plan`), and which of them are broad enough to be
researched in parts. A model that fails leaves the rules' plan and says why."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contracts.models import RetrievedChunk
from engines.critic.llm_decompose import llm_plan
from engines.critic.plan import has_parts, plan
from infra.llm import LLMClient
from infra.logging import get_logger

log = get_logger(__name__)

MAX_ERROR_CHARS = 500


@dataclass(frozen=True)
class ResearchPlan:
    questions: list[str]
    planner: str
    """`llm` when the model's questions were taken, else `rules`."""
    broad: list[bool]
    """Per question: it has parts of its own (never the first, the question itself)."""
    error: str | None = None
    """Why the model's plan was not taken, when it failed."""


async def research_plan(
    query: str,
    contexts: Sequence[RetrievedChunk],
    max_questions: int,
    client: LLMClient | None,
) -> ResearchPlan:
    questions = plan(query, contexts, max_questions)
    planner, error = "rules", None
    if client is not None:
        try:
            asked = await llm_plan(client, query, contexts, max_questions)
        except Exception as exc:  # the rules' plan stands
            log.exception("llm_research_plan_failed")
            error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
        else:
            if asked:
                questions, planner = asked, "llm"
    broad = [n > 0 and has_parts(q) for n, q in enumerate(questions)]
    return ResearchPlan(questions, planner, broad, error)
