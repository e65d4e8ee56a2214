"""The classify worker on the bus: `rag.cmd.classify` in, `rag.res.classify` out.

A question of a session is first made standalone from the session's earlier turns (the
`query_rewrite` phase: by the LLM when one is configured, else by the rules of
`engines.classify.rewrite`), and the standalone question is what is classified and embedded.

A question that matches one of the operator's tool routes (a route of an MCP server in
RAGBUS_MCP_CONFIG, `infra.tool_routes`) whose server its tenant may use is a `tool` question,
as arithmetic is: the tool worker plans the route's call, no model needed.
"""

from __future__ import annotations

from faststream.nats import NatsRouter

from contracts.access import session_space
from contracts.commands import ClassifyCommand
from contracts.enums import Phase, Step
from contracts.results import ClassifyResult
from engines.classify.classifier import IntentClassifier, described
from engines.classify.llm_rewrite import llm_rewrite
from engines.classify.model_meta import model_dir
from engines.classify.rewrite import Rewrite, rewrite
from infra.llm import describe
from infra.logging import get_logger
from infra.memory.sessions import SessionStore
from infra.runtime.phase_events import phase
from infra.runtime.resources import Resources
from infra.runtime.topology import step_consumer, subscriber_kwargs
from infra.runtime.worker_runtime import ResultPublisher, step_result_fields, step_router
from infra.tenancy.tool_access import ToolAccess
from infra.tool_routes import ToolRoutes

log = get_logger(__name__)


def create_router(resources: Resources) -> NatsRouter:
    bus, settings = resources.bus, resources.settings
    classifier = IntentClassifier(resources.encoder, model_dir(settings))
    sessions = SessionStore.from_settings(resources.redis(), settings)
    router = step_router(resources)
    resources.on_warm_up(lambda: classifier.classify("warm up", None))
    publisher = ResultPublisher(router, Step.CLASSIFY, ClassifyResult)
    claims = resources.claims()
    routes = ToolRoutes(settings.mcp_server_configs(), ToolAccess(resources.redis(), settings))

    async def standalone(cmd: ClassifyCommand) -> Rewrite | None:
        """The question made standalone from its session's earlier turns (None: no session)."""
        if cmd.session_id is None:
            return None
        async with phase(bus, cmd, Phase.QUERY_REWRITE) as run:
            history = await sessions.turns(
                session_space(cmd.tenant, cmd.reader),
                cmd.session_id,
                before=cmd.submitted_at,
                limit=settings.session_context_turns,
            )
            made = rewrite(cmd.query, history)
            llm = resources.llm()
            if llm is not None and history:
                try:
                    made = Rewrite(await llm_rewrite(llm, cmd.query, history), "llm")
                except Exception as exc:  # RewriteUnusable, or the model failed: rules stand
                    log.warning("llm_rewrite_failed", error=describe(exc))
                    run.metadata["llm_error"] = describe(exc)[:300]
            run.metadata.update(
                method=made.method,
                standalone_query=made.standalone,
                turns=len(history),
                antecedent=made.antecedent,
            )
        return made

    @router.subscriber(**subscriber_kwargs(step_consumer(Step.CLASSIFY), settings, ClassifyCommand))
    async def classify(cmd: ClassifyCommand) -> None:
        """Intent, confidence and channel weights for the query, plus its embedding."""
        made = await standalone(cmd)
        question = made.standalone if made is not None else cmd.query
        async with phase(bus, cmd, Phase.INTENT_CLASSIFICATION) as run:
            routed = (
                None
                if cmd.intent_override is not None
                else await routes.tool_for(cmd.tenant, question)
            )
            found = await classifier.classify(question, cmd.intent_override, routed=bool(routed))
            run.metadata.update(described(found))
            if routed:
                run.metadata["tool_route"] = routed
        result = ClassifyResult(
            **step_result_fields(cmd, run),
            intent=found.intent,
            confidence=found.confidence,
            method=found.method,
            weights=found.weights,
            # a claim check: 2 KB that four messages need not carry
            query_vector=await claims.put_vector(cmd.request_id, question, found.query_vector),
            standalone_query=made.standalone if made is not None else None,
            rewrite_method=made.method if made is not None else None,
        )
        await publisher.publish(result)

    return router
