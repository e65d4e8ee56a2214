"""The critic worker on the bus: `rag.cmd.critic` in, `rag.res.critic` out.

With `RAGBUS_NLI_PATH` set, an NLI model's entailment joins the per-sentence support (see
`scoring`); the phase metadata names the model (`nli`) and the scores carry `nli`. A model that
cannot load or run is logged and skipped (`nli_error` in the metadata): the critique is then the
one without it, never a failed request.

When the critic decomposes a question and an LLM is configured, the model rewrites the
follow-up queries (`llm_decompose`); the phase metadata's `planner` says whose were sent
(`llm` or `bridges`), and a model that fails leaves the bridge follow-ups (`plan_error`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from faststream.nats import NatsRouter

from contracts.commands import CriticCommand, PlanCommand
from contracts.enums import Phase, Step
from contracts.results import CriticResult, PlanResult
from infra.logging import get_logger
from infra.retrieval.vectors.codec import unpack_query
from infra.runtime.bus import step_consumer, subscriber_kwargs
from infra.runtime.resources import Resources
from infra.runtime.worker_runtime import (
    ResultPublisher,
    phase,
    step_result_fields,
    step_router,
)
from workers.critic.decompose import sub_queries
from workers.critic.llm_decompose import llm_plan, llm_sub_queries
from workers.critic.plan import has_parts, plan
from workers.critic.scoring import Entailment, score_answer
from workers.critic.verdict import Verdict, judge_answer, judge_tools

log = get_logger(__name__)


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


def create_router(resources: Resources) -> NatsRouter:
    bus, settings = resources.bus, resources.settings
    router = step_router(resources)
    resources.on_warm_up(resources.encoder, resources.nli)
    publisher = ResultPublisher(router, Step.CRITIC, CriticResult)
    claims = resources.claims()

    @router.subscriber(**subscriber_kwargs(step_consumer(Step.CRITIC), settings, CriticCommand))
    async def critic(cmd: CriticCommand) -> None:
        """Score the answer and tell the orchestrator to accept it or how to retry."""
        async with phase(bus, cmd, Phase.CRITIC) as run:
            cmd = await claims.whole(cmd)
            verdict, scores = await critique(cmd, resources, run.metadata)
            run.metadata.update(
                verdict=verdict.verdict,
                confidence=verdict.confidence,
                scores=scores,
                strategy=verdict.strategy,
            )
            if verdict.sub_queries:
                run.metadata["sub_queries"] = verdict.sub_queries
        result = CriticResult(
            **step_result_fields(cmd, run),
            verdict=verdict.verdict,
            confidence=verdict.confidence,
            scores=scores,
            strategy=verdict.strategy,
            rewritten_query=verdict.rewritten_query,
            sub_queries=verdict.sub_queries,
            reasons=verdict.reasons,
        )
        await publisher.publish(result)

    planned = ResultPublisher(router, Step.PLAN, PlanResult)

    @router.subscriber(
        **subscriber_kwargs(step_consumer(Step.PLAN), settings, PlanCommand), title="plan"
    )
    async def plan_research(cmd: PlanCommand) -> None:
        """A research request's sub-questions: by the model when one is configured, else its
        facets, entities and bridges (`workers.critic.plan`)."""
        async with phase(bus, cmd, Phase.RESEARCH_PLAN) as run:
            cmd = await claims.whole(cmd)
            questions = plan(cmd.query, cmd.contexts, cmd.max_questions)
            planner = "rules"
            client = resources.llm()
            if client is not None:
                try:
                    asked = await llm_plan(client, cmd.query, cmd.contexts, cmd.max_questions)
                except Exception as exc:  # the rules' plan stands
                    log.exception("llm_research_plan_failed")
                    run.metadata["plan_error"] = f"{type(exc).__name__}: {exc}"[:500]
                else:
                    if asked:
                        questions, planner = asked, "llm"
            broad = [n > 0 and has_parts(q) for n, q in enumerate(questions)]
            run.metadata.update(planner=planner, sub_questions=questions, broad=broad)
        await planned.publish(
            PlanResult(
                **step_result_fields(cmd, run),
                sub_questions=questions,
                planner=planner,
                broad=broad,
            )
        )

    return router
