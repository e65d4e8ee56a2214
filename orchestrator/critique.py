"""The critic's part of the saga: pure decisions, like the rest of it (`orchestrator.saga`
runs them).

An answer is judged either by the critic step (`rag.cmd.critic`) or, with
`RAGBUS_CRITIQUE_WITH_GENERATION`, by the generating worker itself, which reports the verdict
with the answer (`GenerateResult.critique`): one hop fewer. The saga asks for the latter only
while the generation's and the critic's deadlines together fit in what is left of the
request's, so that every fallback stays reachable (`orchestrator.generate`). Either way the
verdict ends the attempt: accepted (or the attempts are spent) completes the request, a retry
starts the next attempt with the critic's strategy, searched again (a hand-off,
`orchestrator.handoffs.StartSearch`, for the saga's top to run).
"""

from __future__ import annotations

from contracts.commands import CriticCommand
from contracts.enums import Intent, Phase, PhaseStatus, RequestStatus, Step
from contracts.results import CriticResult, Critique
from infra.retrieval.intent_profiles import EVEN
from infra.settings import Settings
from orchestrator import endings, moves
from orchestrator.handoffs import Decision, StartSearch
from orchestrator.moves import Clock
from orchestrator.state import AttemptRecord, RequestState
from orchestrator.transition import Transition


def start_critic(settings: Settings, state: RequestState, clock: Clock) -> Transition:
    """The critic step's own command, for an answer nobody judged yet."""
    cmd = CriticCommand(
        **moves.corr(state),
        query=state.question,
        intent=state.intent or Intent.FACTUAL,
        answer=state.draft or "",
        citations=state.draft_citations,
        **moves.contexts(state),
        tool_results=state.tool_results,
        attempts_left=max(0, settings.max_attempts - state.attempt),
        query_vector=state.query_vector,
    )
    state.status = RequestStatus.CRITIQUING
    state.pending = moves.pending(
        Step.CRITIC, {Step.CRITIC.value: cmd.event_id}, settings.critic_timeout_s, clock
    )
    return moves.moved(state, [moves.command(cmd, Step.CRITIC)])


def on_critique(settings: Settings, state: RequestState, res: CriticResult | Critique) -> Decision:
    """The attempt's verdict, from the critic step or with the answer: record it, then end
    the request or try again."""
    state.attempts.append(
        AttemptRecord(
            attempt=state.attempt,
            confidence=res.confidence,
            verdict=res.verdict,
            strategy=res.strategy,
            reasons=res.reasons,
            scores=res.scores,
            documents=list(dict.fromkeys(c.document_id for c in state.fused)),
            queries=list(state.search_queries),
            answer=state.draft or "",
        )
    )
    if res.verdict != "retry" or state.attempt >= settings.max_attempts:
        return endings.complete(state, [])
    return retry(state, res)


def retry(state: RequestState, res: CriticResult | Critique) -> StartSearch:
    """The next attempt, searched again the way the critic's strategy says."""
    strategy = res.strategy or "broaden"
    changes: dict[str, object] = {"strategy": strategy}
    if strategy == "broaden":  # the same queries, deeper, and more contexts
        state.channel_top_k = min(200, state.channel_top_k * 2)
        state.top_k = min(50, state.top_k + 4)
        changes.update(channel_top_k=state.channel_top_k, top_k=state.top_k)
    elif strategy == "decompose" and res.sub_queries:
        state.carried = list(state.fused)  # the first hop stays; the follow-ups add to it
        state.search_queries = list(res.sub_queries)
        changes["search_queries"] = state.search_queries
    else:
        state.carried = []
        if strategy == "rebalance":
            state.weights = dict(EVEN)
            changes["weights"] = {c.value: w for c, w in state.weights.items()}
        if res.rewritten_query:
            state.search_queries = [res.rewritten_query]
            changes["search_queries"] = state.search_queries
    previous = state.attempt
    state.attempt += 1
    state.status = RequestStatus.RETRYING
    state.tool_results = []
    state.tool_rounds = 0
    retry_phase = moves.phase(
        state,
        Phase.RETRY,
        PhaseStatus.COMPLETED,
        from_attempt=previous,
        to_attempt=state.attempt,
        confidence=res.confidence,
        reasons=res.reasons,
        **changes,
    )
    return StartSearch([retry_phase])
