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
from engines.critic.research_plan import research_plan
from infra.runtime.phase_events import phase
from infra.runtime.resources import Resources
from infra.runtime.topology import step_consumer, subscriber_kwargs
from infra.runtime.worker_runtime import ResultPublisher, step_result_fields, step_router


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
        """A research request's sub-questions (`engines.critic.research_plan`)."""
        async with phase(bus, cmd, Phase.RESEARCH_PLAN) as run:
            cmd = await claims.whole(cmd)
            found = await research_plan(cmd.query, cmd.contexts, cmd.max_questions, resources.llm())
            if found.error is not None:
                run.metadata["plan_error"] = found.error
            run.metadata.update(
                planner=found.planner, sub_questions=found.questions, broad=found.broad
            )
        await planned.publish(
            PlanResult(
                **step_result_fields(cmd, run),
                sub_questions=found.questions,
                planner=found.planner,
                broad=found.broad,
            )
        )

    return router
