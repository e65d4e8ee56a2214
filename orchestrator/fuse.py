"""Fusion: the channels' rankings made one list, by the fuse step (`cmd.fuse`) or by a search
worker that fused its own channels (`SearchResult.fused`). Pure decisions, like the rest of the
saga (`orchestrator.saga` runs them).

The fused list ends a retrieval request, goes to a research request's planner
(`orchestrator.research`), or else to generation (`orchestrator.generate`): hand-offs
(`orchestrator.handoffs`) for the saga's top to run.
"""

from __future__ import annotations

from contracts.commands import FuseCommand
from contracts.enums import RequestStatus, Step
from contracts.results import Fused
from infra.settings import Settings
from orchestrator import endings, moves
from orchestrator.handoffs import Decision, StartGenerate, StartPlan
from orchestrator.moves import Clock
from orchestrator.state import RequestState
from orchestrator.transition import Outgoing, Transition


def start(
    settings: Settings, state: RequestState, clock: Clock, messages: list[Outgoing]
) -> Transition:
    """The fuse step, sent after `messages`."""
    cmd = FuseCommand(
        **moves.corr(state),
        query=state.question,
        weights=state.weights,
        results=state.channel_results,
        top_k=state.top_k,
        rrf_k=settings.rrf_k,
        fusion=settings.fusion,
        sub_results=state.sub_results,
        claimed_results=state.claimed_results,
        carried=state.carried,
        hydrate=state.mode != "retrieve",
        namespaces=state.namespaces if moves.scoped(state) else [],
        filter=state.filter,
        reader=state.reader,
    )
    state.status = RequestStatus.FUSING
    state.pending = moves.pending(
        Step.FUSE, {Step.FUSE.value: cmd.event_id}, settings.fuse_timeout_s, clock
    )
    return moves.moved(state, [*messages, moves.command(cmd, Step.FUSE)])


def on_fused(state: RequestState, res: Fused) -> Decision:
    """The fused list, from the fuse step or from a search worker that fused its own
    channels (`SearchResult.fused`)."""
    state.fused = res.chunks
    state.fused_claim = res.contexts_claim
    state.effective_weights = dict(res.effective_weights)
    state.channel_counts = dict(res.channel_counts)
    if state.mode == "retrieve":
        return endings.complete(state, [])
    if state.mode == "research":
        return StartPlan()
    # The channels' rankings are folded into `fused` and only a retrieval answer shows
    # them: every later transition would read and write them again for nothing.
    state.channel_results = {}
    state.sub_results = []
    state.claimed_results = {}
    return StartGenerate()
