"""Search worker: one durable consumer per document channel, one result per command (the
`memory` channel is `workers.memory`'s, beside the store it searches).

A command may name further channels (`SearchCommand.also`, which the saga sets unless
`RAGBUS_SEARCH_BATCH=false`): they run side by side and answer in the same result, each with
its own phase event and its own claimed ranking, so a query's document search is one command,
one result and one saga transition instead of one per channel. When those channels are all
the attempt searches, the command may also ask the worker to fuse them (`SearchCommand.fuse`,
`RAGBUS_FUSE_WITH_SEARCH`): it runs the fuse step's own engine (`engines.fuse.pipeline`) with the
rankings in hand, sends the fusion phase event, and answers with the fused list
(`SearchResult.fused`) instead of claimed rankings: no fuse command, no fuse result, one saga
transition fewer. Fusion that fails there leaves the rankings to the fuse step, as without it.
Such a command carries the search deadline (`SearchCommand.deadline_at`): a channel that has
not answered by then is dropped (its phase event says so, and its outcome is
`CHANNEL_TIMED_OUT`), and the others are answered and fused without it.

A command that asks (`SearchCommand.classify`) is classified first, by the classify step's own
engine (`engines.classify`), and searches the channels its intent weighs.

What is searched, and how, is the search engine's (`engines.search`): each channel's function is
looked up on `engines.search.channels` at call time (`search_channel`), so a test (or an
operator's patch) can replace one channel without rebuilding the router. This worker runs the
engines and says what they did: phase events, claimed rankings, the result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from faststream.nats import NatsRouter
from pydantic import ValidationError

from contracts import subjects as sj
from contracts.commands import SKIPPED_BY_WEIGHT, FuseSpec, SearchCommand, weighed
from contracts.enums import CHANNEL_PHASE, Channel, Intent, Phase, PhaseStatus, Step, StepStatus
from contracts.envelope import utcnow
from contracts.events import PhaseData, PhaseEvent
from contracts.models import ErrorInfo, RetrievedChunk
from contracts.replicas import ReplicaAnswer, ReplicaTask
from contracts.results import CHANNEL_TIMED_OUT, ChannelOutcome, Classified, Fused, SearchResult
from engines.classify.classifier import Classification, IntentClassifier, described
from engines.classify.model_meta import model_dir
from engines.fuse.pipeline import FusionRequest, fuse_rankings
from engines.search.channel_search import CHANNEL_FUNCTIONS, ChannelTimedOut, search_channel
from engines.search.channels import scope_of
from engines.search.refine import refine
from infra.errors import PoisonMessage, describe_error, is_transient
from infra.logging import get_logger
from infra.runtime.phase_events import holding_phase_events, phase, send_while_live
from infra.runtime.replica_hub import REPLICA_CONCURRENCY, ServedCopy
from infra.runtime.resources import Resources
from infra.runtime.step_context import RequestNotLive, current_deliveries, message_context
from infra.runtime.topology import step_consumer, subscriber_kwargs
from infra.runtime.worker_runtime import (
    SHOWN_QUERY_CHARS,
    ResultPublisher,
    result_event_id,
    step_router,
)
from infra.tenancy.tool_access import ToolAccess
from infra.tool_routes import ToolRoutes

log = get_logger(__name__)


@dataclass
class Searched:
    """One channel's part of a command: its ranking (inline or claimed) or its failure."""

    channel: Channel
    chunks: list[RetrievedChunk] = field(default_factory=list)
    claim: str | None = None
    count: int = 0
    query_vector: str | None = None
    duration_ms: float = 0.0
    error: Exception | None = None

    def answer(self, *, inline: bool = True) -> dict[str, Any]:
        """What a result says of the channel, on the command's own channel (`SearchResult`)
        or a further one (`ChannelOutcome`): the same fields in both. The ranking goes inline
        unless it is claimed or `inline` is off (the worker fused it)."""
        return {
            "status": StepStatus.FAILED if self.error else StepStatus.OK,
            "error": _error_info(self.error),
            "chunks": self.chunks if inline and not self.claim else [],
            "ranking_claim": self.claim,
            "count": self.count,
            "duration_ms": self.duration_ms,
        }


def _error_info(exc: Exception | None) -> ErrorInfo | None:
    if exc is None:
        return None
    code = CHANNEL_TIMED_OUT if isinstance(exc, ChannelTimedOut) else "channel_failed"
    return ErrorInfo(code=code, message=describe_error(exc)[:2000])


def skipped(cmd: SearchCommand, channel: Channel) -> PhaseEvent:
    """The phase event of a channel the question's intent does not weigh, as the saga sends
    it for a search it decides itself."""
    now = utcnow()
    return PhaseEvent(
        **cmd.correlation(),
        occurred_at=now,
        data=PhaseData(
            phase=CHANNEL_PHASE[channel],
            status=PhaseStatus.SKIPPED,
            started_at=now,
            duration_ms=0.0,
            metadata={"reason": SKIPPED_BY_WEIGHT},
        ),
    )


def _classified_search(cmd: SearchCommand, found: Classification) -> SearchCommand:
    """The command as the classification leaves it: the query's embedding in hand for the
    dense channel, and fusion by the intent's weights."""
    update: dict[str, Any] = {"query_vector": cmd.query_vector or found.query_vector}
    if cmd.fuse is not None:
        update["fuse"] = cmd.fuse.model_copy(update={"weights": dict(found.weights)})
    return cmd.model_copy(update=update)


def _as_classified(found: Classification | None) -> Classified | None:
    """The classification as the result carries it (`SearchResult.classified`)."""
    if found is None:
        return None
    return Classified(
        intent=found.intent,
        confidence=found.confidence,
        method=found.method,
        weights=dict(found.weights),
    )


Answer = Callable[[SearchCommand, Channel], Awaitable[None]]
"""A search command answered on one channel's subject: searched, fused, its result published."""


def _answerer(resources: Resources, router: NatsRouter) -> Answer:
    """The search worker's work on one command, its results published through `router`: the
    same whether the command came from its JetStream consumer or from the store owner to a
    replica (`create_replica_router`)."""
    settings, bus = resources.settings, resources.bus
    claims = resources.claims()
    # the reranker too (when one is set): this worker fuses what it searched, as a rule
    resources.on_warm_up(
        resources.encoder, resources.vectors, resources.sparse, resources.graph, resources.reranker
    )
    # its model loads on the first question it classifies (`SearchCommand.classify`)
    classifier = IntentClassifier(resources.encoder, model_dir(settings))
    routes = ToolRoutes(settings.mcp_server_configs(), ToolAccess(resources.redis(), settings))
    if settings.classify_with_search:
        resources.on_warm_up(lambda: classifier.classify("warm up", None))

    async def classify_first(cmd: SearchCommand) -> tuple[Classification, list[Channel]]:
        """The classify step's work on the command's question (`ClassifySpec`), its phase
        event included; the channels its intent searches (none for a tool question: the tool
        step answers it), with a `skipped` phase event for each other one."""
        assert cmd.classify is not None
        async with phase(bus, cmd, Phase.INTENT_CLASSIFICATION) as run:
            override = cmd.classify.intent_override
            routed = None if override is not None else await routes.tool_for(cmd.tenant, cmd.query)
            found = await classifier.classify(cmd.query, override, routed=bool(routed))
            run.metadata.update(described(found))
            if routed:
                run.metadata["tool_route"] = routed
        if found.intent is Intent.TOOL:
            return found, []
        searched = weighed(found.weights, cmd.channels)
        for channel in cmd.channels:
            if channel not in searched:
                await send_while_live(bus, skipped(cmd, channel))  # a redelivery asks first
        return found, searched

    async def search_one(
        cmd: SearchCommand, channel: Channel, deadline_at: datetime | None = None
    ) -> Searched:
        # the query is named: a rewritten or decomposed attempt searches other words
        shown = cmd.query[:SHOWN_QUERY_CHARS]
        async with phase(
            bus, cmd, CHANNEL_PHASE[channel], channel=channel.value, query=shown
        ) as run:
            try:
                found = await search_channel(resources, cmd, channel, deadline_at)
            except ChannelTimedOut as exc:
                run.metadata.update(dropped=True, reason=str(exc))
                raise
            chunks = found.chunks
            run.metadata["count"] = len(chunks)
        return Searched(channel, chunks, None, len(chunks), found.query_vector, run.duration_ms)

    async def claim(cmd: SearchCommand, searched: list[Searched]) -> None:
        """Leave the rankings in the claim store, in one write, when the command asks: fusion
        reads them there and the result stays small. Keyed by the command (and the channel,
        for a further one), so a redelivery writes the same fields again."""
        if not cmd.claim_ranking:
            return
        keys = {
            s.channel: cmd.event_id if s.channel is cmd.channel else f"{cmd.event_id}:{s.channel}"
            for s in searched
            if s.error is None
        }
        fields = await claims.put_rankings(
            cmd.request_id, {keys[s.channel]: s.chunks for s in searched if s.channel in keys}
        )
        for s in searched:
            if s.channel in keys:
                s.claim = fields[keys[s.channel]]

    async def search_all(cmd: SearchCommand, wanted: list[Channel]) -> list[Searched]:
        """The `wanted` channels side by side, each until the command's deadline; one that
        fails or misses it is reported failed (its phase event says why) while the others
        answer. Only when every channel failed for a passing reason does the command fail as
        a whole, to be delivered again."""

        async def guarded(channel: Channel) -> Searched:
            try:
                return await search_one(cmd, channel, cmd.deadline_at)
            except RequestNotLive:
                raise
            except Exception as exc:
                return Searched(channel, error=exc)

        searched = await asyncio.gather(*(guarded(channel) for channel in wanted))
        errors = [s.error for s in searched if s.error is not None]
        if len(errors) == len(searched) and all(is_transient(e) for e in errors):
            raise errors[0]
        return list(searched)

    def query_vector_of(cmd: SearchCommand, searched: list[Searched]) -> str | None:
        """The command's (a classifying command carries its classification's), or the one
        the dense channel made."""
        made = [s.query_vector for s in searched if s.channel is Channel.VECTOR and not s.error]
        return cmd.query_vector or (made[0] if made else None)

    async def refine_text_channels(cmd: SearchCommand, searched: list[Searched]) -> None:
        """The text channels' lists completed and searched again (`engines.search.refine`),
        in place of those they answered."""
        ok = {s.channel: s for s in searched if s.error is None}
        lists = {c: s.chunks for c, s in ok.items()}
        refined = await refine(resources, cmd, query_vector_of(cmd, searched), lists)
        for channel, chunks in refined.items():
            ok[channel].chunks = chunks

    async def fuse_searched(
        cmd: SearchCommand, spec: FuseSpec, searched: list[Searched]
    ) -> Fused | None:
        """The command's rankings fused here, as the fuse step would (`SearchCommand.fuse`).
        None when fusion failed: its phase event says so, and the rankings go back as without
        it, for the saga's fuse step to try again."""
        try:
            async with phase(bus, cmd, Phase.FUSION) as run:
                job = FusionRequest(
                    request_id=cmd.request_id,
                    question=spec.question or cmd.query,
                    weights=spec.weights,
                    results={s.channel: s.chunks for s in searched if s.error is None},
                    top_k=spec.top_k,
                    rrf_k=spec.rrf_k,
                    fusion=spec.fusion,
                    scope=await scope_of(resources, cmd),
                    metadata=run.metadata,
                )
                try:
                    return await fuse_rankings(resources, claims, job)
                except Exception:
                    run.metadata["fallback"] = "the fuse step"
                    raise
        except RequestNotLive:
            raise
        except Exception:
            log.exception("fusion_with_search_failed")
            return None

    publishers = {
        channel: ResultPublisher(router, Step.SEARCH, SearchResult, channel)
        for channel in CHANNEL_FUNCTIONS
    }

    async def answer(cmd: SearchCommand, channel: Channel) -> None:
        cmd = await claims.with_vector(cmd)
        classified: Classification | None = None
        wanted = cmd.channels
        if cmd.classify is not None:
            classified, wanted = await classify_first(cmd)
            cmd = _classified_search(cmd, classified)
        if wanted == [channel] and classified is None:
            # one channel: its failure takes the error policy's way (retry, report)
            searched = [await search_one(cmd, channel)]
        else:  # a classifying search reports a failed channel beside its classification
            searched = await search_all(cmd, wanted) if wanted else []
        if searched and settings.fusion == "convex":
            await refine_text_channels(cmd, searched)
        fuse = cmd.fuse if searched else None
        fused = await fuse_searched(cmd, fuse, searched) if fuse else None
        if fused is None and searched:
            await claim(cmd, searched)
        by_channel = {s.channel: s for s in searched}
        own = by_channel.pop(channel, None) or Searched(channel)  # unsearched: not awaited
        inline = fused is None
        vector = own.query_vector or (classified.query_vector if classified else None)
        result = SearchResult(
            **cmd.correlation(),
            **own.answer(inline=inline),
            command_id=cmd.event_id,
            event_id=result_event_id(cmd),
            channel=channel,
            query_vector=await claims.put_vector(cmd.request_id, cmd.query, vector),
            also=[
                ChannelOutcome(channel=s.channel, **s.answer(inline=inline))
                for s in by_channel.values()
            ],
            fused=fused,
            classified=_as_classified(classified),
        )
        await publishers[channel].publish(result)

    return answer


def _checked(cmd: SearchCommand, channel: Channel) -> None:
    """`PoisonMessage` for a command this worker cannot answer as sent."""
    if cmd.channel is not channel:
        raise PoisonMessage(f"a {cmd.channel} command on the {channel} subject")
    unknown = [c for c in cmd.also if c not in CHANNEL_FUNCTIONS]
    if unknown:
        raise PoisonMessage(f"the search worker has no {unknown[0]} channel")


def create_router(resources: Resources) -> NatsRouter:
    """One durable consumer per document channel. In the process that owns the embedded stores
    with search replicas beside it (`Resources.search_replicas`), a command goes to a replica
    whose copy holds every write (`infra.runtime.replica_hub`), else it is answered here."""
    settings = resources.settings
    router = step_router(resources)
    answer = _answerer(resources, router)

    def register(channel: Channel) -> None:
        async def handle(cmd: SearchCommand) -> None:
            _checked(cmd, channel)
            replicas = resources.search_replicas
            if replicas is None:
                await answer(cmd, channel)
            elif not await replicas.hand_off(cmd, channel, current_deliveries()):
                with replicas.answering_here():
                    await answer(cmd, channel)

        handle.__name__ = f"search_{channel.value}"
        router.subscriber(
            **subscriber_kwargs(step_consumer(Step.SEARCH, channel), settings, SearchCommand),
            title=f"search.{channel.value}",
        )(handle)

    for channel in CHANNEL_FUNCTIONS:  # the memory channel is the memory worker's
        register(channel)
    return router


def create_replica_router(resources: Resources, replica: str, served: ServedCopy) -> NatsRouter:
    """A search replica's one subscriber (core NATS, no stream): the commands its store owner
    hands it, each answered as the search worker answers it, from the copy `served` names,
    when that copy holds the writes the command needs (else `stale`: the owner answers it).
    Its phase events and result go out as the worker's own; a failure is told to the owner,
    which answers the command itself, so the error policy stays the owner's."""
    router = NatsRouter()
    answer = _answerer(resources, router)

    @router.subscriber(
        sj.search_replica_subject(replica),
        max_workers=REPLICA_CONCURRENCY,
        title=f"search replica {replica}",
        include_in_schema=False,
    )
    async def take(body: Any) -> bytes:
        # the body as FastStream decodes it (JSON: a dict), validated here, so a malformed
        # task is answered `failed` (the owner answers the command) rather than never
        return (await take_task(body)).model_dump_json().encode()

    async def take_task(body: Any) -> ReplicaAnswer:
        try:
            if isinstance(body, bytes | str):
                task = ReplicaTask.model_validate_json(body)
            else:
                task = ReplicaTask.model_validate(body)
        except ValidationError as exc:
            return ReplicaAnswer(status="failed", error=f"a malformed task: {exc.error_count()}")
        if not served.holds(task.version):
            return ReplicaAnswer(status="stale")
        with (
            served.answering(),
            message_context(resources.is_live, task.deliveries),
            holding_phase_events(resources.bus) as held,
        ):
            try:
                _checked(task.command, task.channel)
                await answer(task.command, task.channel)
                await held.flush()
            except RequestNotLive:
                held.drop()  # nothing waits: the owner acknowledges the command
            except Exception as exc:
                held.drop()  # the owner answers the command itself, with its own events
                log.exception("replica_search_failed", request_id=task.command.request_id)
                return ReplicaAnswer(status="failed", error=describe_error(exc)[:2000])
        served.answered += 1
        return ReplicaAnswer(status="done")

    return router
