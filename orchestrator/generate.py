"""Generation and its tool rounds: generating <-> tooling. Pure decisions, like the rest of
the saga (`orchestrator.saga` runs them).

A generated answer asks for tools (another round, while `RAGBUS_MAX_TOOL_CALLS` allows) or
goes to be judged: with its verdict when the generating worker judged it
(`RAGBUS_CRITIQUE_WITH_GENERATION`, `GenerateResult.critique`), else in the critic step. The
saga asks the worker to judge only while the generation's and the critic's deadlines together
fit in what is left of the request's, so that every fallback stays reachable
(`attempts_for_generation`). The verdict is `orchestrator.critique`'s: a hand-off
(`orchestrator.handoffs`) for the saga's top to run.
"""

from __future__ import annotations

from contracts.commands import GenerateCommand, ToolCommand
from contracts.enums import Intent, RequestStatus, Step
from contracts.models import ToolCall, ToolOutcome
from contracts.results import GenerateResult, ToolResult
from infra.settings import Settings
from orchestrator import moves
from orchestrator.handoffs import Decision, StartCritic, TakeCritique
from orchestrator.moves import Clock
from orchestrator.state import RequestState
from orchestrator.transition import Outgoing, Transition


def start(settings: Settings, state: RequestState, clock: Clock) -> Transition:
    """The generate step, over the fused list and the tool rounds' results."""
    follow_ups = state.search_queries if state.carried else []  # a decomposed attempt
    cmd = GenerateCommand(
        **moves.corr(state),
        query=state.question,
        intent=state.intent or Intent.FACTUAL,
        **moves.contexts(state),
        tool_results=state.tool_results,
        tool_rounds_left=max(0, settings.max_tool_calls - state.tool_rounds),
        follow_ups=follow_ups,
        query_vectors={
            text: vector
            for text in [state.question, *follow_ups]
            if (vector := moves.vector_of(state, text)) is not None
        },
        critique_attempts_left=attempts_for_generation(settings, state, clock),
    )
    state.status = RequestStatus.GENERATING
    timeout = generation_timeout(settings, judged=cmd.critique_attempts_left is not None)
    state.pending = moves.pending(
        Step.GENERATE, {Step.GENERATE.value: cmd.event_id}, timeout, clock
    )
    return moves.moved(state, [moves.command(cmd, Step.GENERATE)])


def attempts_for_generation(settings: Settings, state: RequestState, clock: Clock) -> int | None:
    """The attempts left, for a generation that judges its own answer; None: the critic
    judges it in a step of its own (the setting is off, or the two deadlines together
    would outlast the request's, whose fallbacks must stay reachable)."""
    if not settings.critique_with_generation:
        return None
    if clock.now + generation_timeout(settings, judged=True) >= state.deadline_at:
        return None
    return max(0, settings.max_attempts - state.attempt)


def generation_timeout(settings: Settings, *, judged: bool) -> float:
    """The generating step's deadline: generation's, and the critic's too when the worker
    judges its own answer."""
    return settings.generate_timeout_s + (settings.critic_timeout_s if judged else 0.0)


def on_generated(
    settings: Settings, state: RequestState, res: GenerateResult, clock: Clock
) -> Decision:
    """A tool round, or the draft answer to be judged."""
    if res.tool_calls and state.tool_rounds < settings.max_tool_calls:
        return start_tool(settings, state, clock, res.tool_calls)
    state.draft = res.answer
    state.draft_citations = dict(res.citations)
    state.generator = res.generator
    if res.openings:  # cited passages the fused list carried without their opening
        state.fused = [
            c.model_copy(update={"text": res.openings[c.chunk_id]})
            if not c.text and c.chunk_id in res.openings
            else c
            for c in state.fused
        ]
    if res.critique is not None:  # judged where it was written (`critique_attempts_left`)
        return TakeCritique(res.critique)
    return StartCritic()


def start_tool(
    settings: Settings,
    state: RequestState,
    clock: Clock,
    calls: list[ToolCall],
    messages: list[Outgoing] | None = None,
) -> Transition:
    """A tool round (the tool step), sent after `messages`."""
    cmd = ToolCommand(
        **moves.corr(state),
        query=state.question,
        calls=calls,
        filter=state.filter,
        reader=state.reader,
    )
    state.status = RequestStatus.TOOLING
    state.tool_rounds += 1
    state.pending = moves.pending(
        Step.TOOL, {Step.TOOL.value: cmd.event_id}, settings.tool_timeout_s, clock
    )
    return moves.moved(state, [*(messages or []), moves.command(cmd, Step.TOOL)])


def on_tools(settings: Settings, state: RequestState, res: ToolResult, clock: Clock) -> Transition:
    """The round's outcomes go to the next generation."""
    state.tool_results.extend(res.outcomes)
    return start(settings, state, clock)


def tool_failed(
    settings: Settings, state: RequestState, call_id: str, error: str, clock: Clock
) -> Transition:
    """A tool round that failed or missed its deadline: generation goes on, told so."""
    state.tool_results.append(ToolOutcome(call_id=call_id, name="tool", ok=False, error=error))
    return start(settings, state, clock)
