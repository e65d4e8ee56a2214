"""The generate worker on the bus: `rag.cmd.generate` in, `rag.res.generate` out, and the
model's tokens to the caller while it writes. What writes the answer is the generate engine
(`engines.generate`); what judges it, when asked, the critic engine (`self_critique`).

Without `RAGBUS_LLM_BASE_URL` the answer is extractive: it exists whole the moment it is
composed, so it is not streamed. The caller gets it once, in the request's `answer` event,
a few milliseconds later, after the critic has judged it. With it, an OpenAI-compatible
model writes the answer, streamed as `token` events (and may ask for tools); when the model
fails — unreachable, timing out, erroring after its retries, or answering nothing — the
extractive generator answers instead and the generation phase says so (`generator:
extractive`, `fallback_from: llm`, `reason`): never a silent empty answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from faststream.nats import NatsRouter

from contracts.commands import GenerateCommand
from contracts.enums import Phase, Step
from contracts.limits import FUSED_OPENINGS
from contracts.models import ToolCall
from contracts.results import GenerateResult
from engines.generate.answer import answer_for
from engines.generate.extractive import Answer
from engines.generate.llm import EmptyAnswer, llm_answer
from infra.llm import LLMClient, LLMStreamBroken, describe
from infra.logging import get_logger
from infra.runtime.claims import opening
from infra.runtime.phase_events import PhaseRun, phase
from infra.runtime.resources import Resources
from infra.runtime.topology import step_consumer, subscriber_kwargs
from infra.runtime.worker_runtime import ResultPublisher, step_result_fields, step_router
from workers.generate.self_critique import self_critique, wants_critique
from workers.generate.streaming import TokenEmitter
from workers.generate.tool_offer import ToolOffer

log = get_logger(__name__)

GENERATOR = "extractive"
LLM_GENERATOR = "llm"


async def _extractive(cmd: GenerateCommand, resources: Resources, run: PhaseRun) -> Answer:
    """The extractive answer. No `token` events: only a model streams (the answer event
    carries the text, so streaming it too would send it twice)."""
    answer = await answer_for(cmd, resources)
    run.metadata.update(
        sentences=answer.sentences,
        citations=len(answer.citations),
        generator=GENERATOR,
        encoded=answer.encoded,
    )
    return answer


async def _with_llm(
    cmd: GenerateCommand,
    resources: Resources,
    client: LLMClient,
    emitter: TokenEmitter,
    run: PhaseRun,
    offer: ToolOffer,
) -> tuple[Answer, list[ToolCall], str]:
    """The model's answer, or the extractive one with the reason the model gave none."""
    try:
        specs = await offer.for_tenant(cmd.tenant) if cmd.tool_rounds_left > 0 else []
        got = await llm_answer(cmd, client, emitter.emit, specs)
        await emitter.flush()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if isinstance(exc, EmptyAnswer):
            reason = str(exc)
        else:
            reason = describe(exc)
            if not isinstance(exc, LLMStreamBroken):
                reason = f"{reason} (after {client.max_retries + 1} attempts at most)"
        log.warning("llm_fallback", reason=reason, error_type=type(exc).__name__)
        await emitter.flush()  # what the model did say stays said
        partial = emitter.count
        answer = await _extractive(cmd, resources, run)
        run.metadata.update(fallback_from=LLM_GENERATOR, reason=reason, model=client.model)
        if partial:
            run.metadata["partial_llm_tokens"] = partial
        return answer, [], GENERATOR
    metadata: dict[str, Any] = {
        "generator": LLM_GENERATOR,
        "model": got.model,
        "tokens": got.tokens,
        "sentences": got.sentences,
        "citations": len(got.citations),
        "invalid_citations": got.dropped_citations,
        "citations_removed": len(got.dropped_citations),
        "attempts": got.attempts,
        "finish_reason": got.finish_reason,
        "tools_offered": cmd.tool_rounds_left > 0,
    }
    if got.tool_calls:
        metadata["tool_calls"] = [c.name for c in got.tool_calls]
    if got.ignored_tool_calls:
        metadata["ignored_tool_calls"] = got.ignored_tool_calls
    if got.problems:
        metadata["tool_call_problems"] = got.problems
    run.metadata.update(metadata)
    answer = Answer(text=got.text, citations=got.citations, sentences=got.sentences)
    return answer, got.tool_calls, LLM_GENERATOR


def cited_openings(cmd: GenerateCommand, citations: dict[int, str]) -> dict[str, str]:
    """The openings of the cited passages that the fused list carried without one (past its
    first `FUSED_OPENINGS`, `Claims.put`): the answer's citations show them."""
    cited = set(citations.values())
    return {
        chunk.chunk_id: opening(chunk.text)
        for chunk in cmd.contexts[FUSED_OPENINGS:]
        if chunk.chunk_id in cited and chunk.text
    }


def create_router(resources: Resources, llm: LLMClient | None = None) -> NatsRouter:
    bus, settings = resources.bus, resources.settings
    client = llm
    if client is None and settings.llm_base_url:
        client = LLMClient.from_settings(settings)
    router = step_router(resources)
    # extractive answers encode the few passages ingested without sentence vectors
    resources.on_warm_up(resources.encoder)
    if settings.critique_with_generation:  # it judges its own answers: the critic's models
        resources.on_warm_up(resources.nli)
    publisher = ResultPublisher(router, Step.GENERATE, GenerateResult)
    claims = resources.claims()
    offer = ToolOffer(resources.redis(), settings)

    @router.subscriber(**subscriber_kwargs(step_consumer(Step.GENERATE), settings, GenerateCommand))
    async def generate(cmd: GenerateCommand) -> None:
        """Compose the answer (a model's streamed as tokens), then report it with its
        citations (and, when asked, the critic's verdict on it: `self_critique`)."""
        start: dict[str, Any] = {"generator": LLM_GENERATOR if client else GENERATOR}
        if client is not None:
            start["model"] = client.model
        tool_calls: list[ToolCall] = []
        generator = GENERATOR
        async with phase(bus, cmd, Phase.GENERATION, **start) as run:
            cmd = await claims.whole(cmd)
            if client is None:
                answer = await _extractive(cmd, resources, run)
            else:
                answer, tool_calls, generator = await _with_llm(
                    cmd, resources, client, TokenEmitter(bus, cmd), run, offer
                )
        critique = None
        if wants_critique(cmd, tool_calls):
            critique = await self_critique(bus, cmd, answer, resources)
        result = GenerateResult(
            **step_result_fields(cmd, run),
            answer=answer.text,
            citations=answer.citations,
            tool_calls=tool_calls,
            generator=generator,
            openings=cited_openings(cmd, answer.citations),
            critique=critique,
        )
        await publisher.publish(result)

    return router
