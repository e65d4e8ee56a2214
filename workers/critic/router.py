"""The critic worker on the bus: `rag.cmd.critic` in, `rag.res.critic` out; the judgement and
the research plan are the critic engine's (`engines.critic`).

With `RAGBUS_NLI_PATH` set, an NLI model's entailment joins the per-sentence support (see
`engines.critic.scoring`); the phase metadata names the model (`nli`) and the scores carry
`nli`. A model that cannot load or run is logged and skipped (`nli_error` in the metadata): the
critique is then the one without it, never a failed request.

When the critic decomposes a question and an LLM is configured, the model rewrites the
follow-up queries (`engines.critic.llm_decompose`); the phase metadata's `planner` says whose
were sent (`llm` or `bridges`), and a model that fails leaves the bridge follow-ups
(`plan_error`).
"""

from __future__ import annotations

from faststream.nats import NatsRouter

from contracts.commands import CriticCommand, PlanCommand
from contracts.enums import Phase, Step
from contracts.results import CriticResult, PlanResult
from engines.critic.judge import as_critique, judge
from engines.critic.llm_decompose import llm_plan
from engines.critic.plan import has_parts, plan
from infra.logging import get_logger
from infra.runtime.phase_events import phase
from infra.runtime.resources import Resources
from infra.runtime.topology import step_consumer, subscriber_kwargs
from infra.runtime.worker_runtime import ResultPublisher, step_result_fields, step_router

log = get_logger(__name__)


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
            whole = await claims.whole(cmd)  # its claimed passages, read inside the phase
            verdict, scores = await judge(whole, resources, run.metadata)
        found = as_critique(verdict, scores)
        result = CriticResult(**step_result_fields(cmd, run), **dict(found))
        await publisher.publish(result)

    planned = ResultPublisher(router, Step.PLAN, PlanResult)

    @router.subscriber(
        **subscriber_kwargs(step_consumer(Step.PLAN), settings, PlanCommand), title="plan"
    )
    async def plan_research(cmd: PlanCommand) -> None:
        """A research request's sub-questions: by the model when one is configured, else its
        facets, entities and bridges (`engines.critic.plan`)."""
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
