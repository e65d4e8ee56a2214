"""The generate worker on the bus: `rag.cmd.generate` in, tokens out, `rag.res.generate` out."""

from __future__ import annotations

from faststream import AckPolicy
from faststream.nats import JStream, NatsRouter

from contracts.commands import GenerateCommand
from contracts.enums import Intent, Phase, Step
from contracts.results import GenerateResult
from contracts.subjects import STREAM_RES, res_subject
from infra.bus import step_consumer, subscriber_kwargs
from infra.resources import Resources
from infra.worker_runtime import error_policy, phase, step_result_fields
from workers.generate.extractive import Answer, extractive_answer, no_evidence_answer
from workers.generate.streaming import stream_answer
from workers.generate.tools import tool_answer

GENERATOR = "extractive"


async def answer_for(cmd: GenerateCommand, resources: Resources) -> Answer:
    """Tool outcomes answer a tool question; otherwise the contexts do, or we say we found
    nothing."""
    if cmd.tool_results or (cmd.intent is Intent.TOOL and not cmd.contexts):
        return Answer(text=tool_answer(cmd.tool_results), citations={}, sentences=0)
    if not cmd.contexts:
        return no_evidence_answer(cmd.query)
    return await extractive_answer(cmd.query, cmd.contexts, await resources.encoder())


def create_router(resources: Resources) -> NatsRouter:
    bus, settings = resources.bus, resources.settings
    router = NatsRouter(
        middlewares=[error_policy(bus, settings, report_failures=True)],
        ack_policy=AckPolicy.MANUAL,
    )
    publisher = router.publisher(
        res_subject(Step.GENERATE),
        stream=JStream(STREAM_RES, declare=False),
        schema=GenerateResult,
    )

    @router.subscriber(**subscriber_kwargs(step_consumer(Step.GENERATE), settings))
    async def generate(cmd: GenerateCommand) -> None:
        """Compose the answer, stream it as tokens, then report it with its citations."""
        async with phase(bus, cmd, Phase.GENERATION, generator=GENERATOR) as run:
            answer = await answer_for(cmd, resources)
            tokens = await stream_answer(bus, cmd, answer.text)
            run.metadata.update(
                sentences=answer.sentences,
                citations=len(answer.citations),
                tokens=tokens,
                generator=GENERATOR,
            )
        result = GenerateResult(
            **step_result_fields(cmd, run),
            answer=answer.text,
            citations=answer.citations,
            generator=GENERATOR,
        )
        await publisher.publish(
            result.model_dump(mode="json"), headers={"Nats-Msg-Id": result.event_id}
        )

    return router
