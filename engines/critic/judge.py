"""The critic's judgement of an answer: its scores, its verdict and, for a decomposition, the
follow-up queries. The critic worker runs it on its own command; a generating worker runs it
on its own answer when the saga asks (`GenerateCommand.critique_attempts_left`), one hop
fewer. Either way the worker measures it as the phase `critic` and hands that phase's
metadata in (`judge`), so both report the same metadata."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from contracts.commands import CriticCommand
from contracts.results import Critique
from engines.critic.decompose import sub_queries
from engines.critic.llm_decompose import llm_sub_queries
from engines.critic.scoring import Entailment, score_answer
from engines.critic.verdict import Verdict, judge_answer, judge_tools
from infra.logging import get_logger
from infra.retrieval.vectors.codec import unpack_query

if TYPE_CHECKING:
    from infra.runtime.resources import Resources

log = get_logger(__name__)


async def judge(
    cmd: CriticCommand, resources: Resources, metadata: dict[str, Any]
) -> tuple[Verdict, dict[str, float]]:
    """The critique of `cmd.answer` (its passages whole), and what the phase `critic` says of
    it: `metadata` (the phase's) learns the verdict, its confidence, scores and strategy, the
    follow-up queries, and whether NLI or a model's plan was used."""
    verdict, scores = await critique(cmd, resources, metadata)
    metadata.update(
        verdict=verdict.verdict,
        confidence=verdict.confidence,
        scores=scores,
        strategy=verdict.strategy,
    )
    if verdict.sub_queries:
        metadata["sub_queries"] = verdict.sub_queries
    return verdict, scores


def as_critique(verdict: Verdict, scores: dict[str, float]) -> Critique:
    """The judgement as a result carries it (`CriticResult`, `GenerateResult.critique`)."""
    return Critique(
        verdict=verdict.verdict,
        confidence=verdict.confidence,
        scores=scores,
        strategy=verdict.strategy,
        rewritten_query=verdict.rewritten_query,
        sub_queries=verdict.sub_queries,
        reasons=verdict.reasons,
    )


async def critique(
    cmd: CriticCommand, resources: Resources, metadata: dict[str, Any] | None = None
) -> tuple[Verdict, dict[str, float]]:
    """The verdict and its scores; `metadata` (the phase's) learns whether NLI was used."""
    metadata = {} if metadata is None else metadata
    if cmd.tool_results:
        return judge_tools(cmd.tool_results, cmd.attempt, cmd.attempts_left), {}
    nli: Entailment | None = None
    if resources.settings.nli_path is not None:
        try:
            model = await resources.nli()
        except Exception as exc:  # an optional model must not fail the critique
            log.exception("nli_unavailable")
            metadata["nli_error"] = f"{type(exc).__name__}: {exc}"[:500]
        else:
            if model is not None:
                nli = model
                metadata["nli"] = model.name
    scores = await score_answer(
        cmd.query,
        cmd.answer,
        cmd.citations,
        cmd.contexts,
        resources.encoding(),
        nli=nli,
        query_vector=unpack_query(cmd.query_vector),
    )
    if scores.nli_error is not None:
        metadata["nli_error"] = scores.nli_error
    verdict = judge_answer(
        cmd.query,
        scores,
        len(cmd.contexts),
        cmd.attempts_left,
        resources.settings.critic_accept,
        sub_queries=sub_queries(cmd.query, cmd.contexts),
    )
    if verdict.strategy == "decompose":
        verdict = await _plan_with_llm(cmd, resources, verdict, metadata)
    return verdict, scores.as_dict()


async def _plan_with_llm(
    cmd: CriticCommand, resources: Resources, verdict: Verdict, metadata: dict[str, Any]
) -> Verdict:
    """The model's follow-up queries instead of the bridge ones, when a model is configured
    and answers with some."""
    metadata["planner"] = "bridges"
    client = resources.llm()
    if client is None:
        return verdict
    try:
        planned = await llm_sub_queries(client, cmd.query, cmd.contexts)
    except Exception as exc:  # the bridge follow-ups are still a good plan
        log.exception("llm_plan_failed")
        metadata["plan_error"] = f"{type(exc).__name__}: {exc}"[:500]
        return verdict
    if not planned:
        metadata["plan_error"] = "the model proposed no follow-up query"
        return verdict
    metadata["planner"] = "llm"
    return dataclasses.replace(verdict, sub_queries=planned)
