"""The classify worker on the bus: `rag.cmd.classify` in, `rag.res.classify` out."""

from __future__ import annotations

from faststream.nats import NatsRouter

from contracts.commands import ClassifyCommand
from contracts.enums import Phase, Step
from contracts.results import ClassifyResult
from infra.runtime.bus import step_consumer, subscriber_kwargs
from infra.runtime.resources import Resources
from infra.runtime.worker_runtime import (
    ResultPublisher,
    phase,
    step_result_fields,
    step_router,
)
from workers.classify.classifier import IntentClassifier
from workers.classify.model_meta import model_dir


def create_router(resources: Resources) -> NatsRouter:
    bus, settings = resources.bus, resources.settings
    classifier = IntentClassifier(resources.encoder, model_dir(settings))
    router = step_router(resources)
    resources.on_warm_up(lambda: classifier.classify("warm up", None))
    publisher = ResultPublisher(router, Step.CLASSIFY, ClassifyResult)

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
        await publisher.publish(result)

    return router
