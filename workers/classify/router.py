"""The classify worker on the bus: `rag.cmd.classify` in, `rag.res.classify` out."""

from __future__ import annotations

from faststream import AckPolicy
from faststream.nats import JStream, NatsRouter

from contracts.commands import ClassifyCommand
from contracts.enums import Phase, Step
from contracts.results import ClassifyResult
from contracts.subjects import STREAM_RES, res_subject
from infra.bus import step_consumer, subscriber_kwargs
from infra.resources import Resources
from infra.worker_runtime import error_policy, phase, step_result_fields
from workers.classify.classifier import IntentClassifier
from workers.classify.model_meta import model_dir


def create_router(resources: Resources) -> NatsRouter:
    bus, settings = resources.bus, resources.settings
    classifier = IntentClassifier(resources.encoder, model_dir(settings))
    router = NatsRouter(
        middlewares=[error_policy(bus, settings, report_failures=True)],
        ack_policy=AckPolicy.MANUAL,
    )
    publisher = router.publisher(
        res_subject(Step.CLASSIFY),
        stream=JStream(STREAM_RES, declare=False),
        schema=ClassifyResult,
    )

    @router.subscriber(**subscriber_kwargs(step_consumer(Step.CLASSIFY), settings))
    async def classify(cmd: ClassifyCommand) -> None:
        """Intent, confidence and channel weights for the query, plus its embedding."""
        async with phase(bus, cmd, Phase.INTENT_CLASSIFICATION) as run:
            found = await classifier.classify(cmd.query, cmd.intent_override)
            run.metadata.update(
                intent=found.intent.value,
                confidence=found.confidence,
                method=found.method,
                weights={c.value: w for c, w in found.weights.items()},
            )
        result = ClassifyResult(
            **step_result_fields(cmd, run),
            intent=found.intent,
            confidence=found.confidence,
            method=found.method,
            weights=found.weights,
            query_vector=found.query_vector,
        )
        await publisher.publish(
            result.model_dump(mode="json"), headers={"Nats-Msg-Id": result.event_id}
        )

    return router
