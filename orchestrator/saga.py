"""The saga's decisions: given a request's state and what just happened, what happens next.

Pure functions over `RequestState`: no I/O, so every path (late results, deadlines,
failed channels, critic retries) is unit-testable. `orchestrator.service` commits
each `Transition` atomically and publishes its messages.

States: submitted -> [classifying, unless the search worker classifies: `orchestrator.search`]
-> searching -> [fusing, unless the search worker fused] -> generating <-> tooling ->
[critiquing, unless generation judged its answer: `orchestrator.critique`] -> (retrying ->
searching ...) -> completed | failed | timed_out; any running
state -> cancelled (`on_cancelled`). A research request goes fusing -> planning ->
researching -> completed (`orchestrator.research`). How a request ends is
`orchestrator.endings`.

This module is the top, as a workflow is: it decides which phase takes what just happened
(`on_result`, `on_tick`, ...), and the phases decide the rest. Each phase is a module of pure
functions below it: classifying (`orchestrator.classify`), searching (`orchestrator.search`),
fusing (`orchestrator.fuse`), generating and tooling (`orchestrator.generate`), critiquing and
retrying (`orchestrator.critique`), planning and researching (`orchestrator.research`). A phase
never imports the saga nor another phase: it returns the `Transition` to commit, or a hand-off
(`orchestrator.handoffs`) that names the phase to go on in, which `Saga.follow`, the dispatch
table, runs. Below the phases: the endings, a research request's lineage
(`orchestrator.lineage`) and the building blocks of every decision (`orchestrator.moves`).
"""

from __future__ import annotations

from typing import assert_never

from contracts.enums import Phase, PhaseStatus, RequestStatus, Step, StepStatus
from contracts.queries import ChildFinished, QueryCancelled, QuerySubmitted
from contracts.results import (
    ClassifyResult,
    CriticResult,
    FuseResult,
    GenerateResult,
    PlanResult,
    SearchResult,
    StepFailure,
    StepResult,
    ToolResult,
)
from infra.settings import Settings
from orchestrator import (
    classify,
    critique,
    endings,
    fuse,
    generate,
    lineage,
    moves,
    research,
    search,
)
from orchestrator.handoffs import (
    Decision,
    SearchClassified,
    StartCritic,
    StartFuse,
    StartGenerate,
    StartPlan,
    StartSearch,
    StartTool,
    TakeCritique,
    TakeFused,
)
from orchestrator.moves import Clock
from orchestrator.state import RequestState
from orchestrator.transition import Transition

__all__ = ["Clock", "Saga"]


class Saga:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # ----------------------------------------------------------------- entry points
    def on_submitted(
        self, state: RequestState | None, msg: QuerySubmitted, clock: Clock
    ) -> Transition:
        if state is None:
            # Never recorded by the API (forged, or its state is lost): nothing to run.
            return Transition(None)
        if state.status is not RequestStatus.SUBMITTED:
            return Transition(None)  # already under way: a re-sent submission changes nothing
        if search.classifies(self.settings, state):
            return search.start_classifying(self.settings, state, clock)
        return classify.start(self.settings, state, clock)

    def on_result(self, state: RequestState | None, result: StepResult, clock: Clock) -> Transition:
        if state is None or state.status.is_terminal or not self._expected(state, result):
            return Transition(None)
        return self.follow(state, self._on_result(state, result, clock), clock)

    def on_child(self, state: RequestState | None, msg: ChildFinished) -> Transition:
        """A research request's child ended (`orchestrator.research`)."""
        return research.on_child(state, msg)

    def on_cancelled(self, state: RequestState | None, msg: QueryCancelled) -> Transition:
        """Stop a request where it stands: `error` (code `cancelled`) and `done` with status
        `cancelled`. Results still on their way are ignored, as for any finished request, and
        workers skip commands of a request that is no longer live. A finished request stays as
        it finished."""
        if state is None or state.status.is_terminal:
            return Transition(None)
        phase = _STEP_PHASE.get(state.pending.step) if state.pending else None
        children = lineage.cancel_running_children(state)
        transition = endings.finish_error(
            state, RequestStatus.CANCELLED, "cancelled", msg.reason, phase
        )
        transition.messages.extend(children)
        return transition

    def on_tick(self, state: RequestState | None, clock: Clock) -> Transition:
        """Deadlines: the whole request's, then the pending step's."""
        if state is None or state.status.is_terminal:
            return Transition(None)
        if clock.now >= state.deadline_at:
            phase = _STEP_PHASE.get(state.pending.step) if state.pending else None
            return endings.finish_error(
                state,
                RequestStatus.TIMED_OUT,
                "request_timeout",
                f"the request did not finish within {self.settings.request_timeout_s:g}s",
                phase,
            )
        pending = state.pending
        if pending is None or clock.now < pending.deadline_at:
            return Transition(None)
        return self.follow(state, self._on_deadline(state, pending.step, clock), clock)

    # ----------------------------------------------------------------- the dispatch table
    def follow(self, state: RequestState, decision: Decision, clock: Clock) -> Transition:
        """Run a phase's decision to the transition it comes to: each hand-off to the phase it
        names, until one decides a `Transition`."""
        settings = self.settings
        while True:
            match decision:
                case Transition():
                    return decision
                case StartSearch(messages=messages):
                    decision = search.start(settings, state, clock, messages)
                case SearchClassified(result=result):
                    decision = search.on_classified(state, result)
                case StartFuse(messages=messages):
                    decision = fuse.start(settings, state, clock, messages)
                case TakeFused(fused=fused):
                    decision = fuse.on_fused(state, fused)
                case StartTool(calls=calls, messages=messages):
                    decision = generate.start_tool(settings, state, clock, calls, messages)
                case StartGenerate():
                    decision = generate.start(settings, state, clock)
                case StartCritic():
                    decision = critique.start_critic(settings, state, clock)
                case TakeCritique(critique=verdict):
                    decision = critique.on_critique(settings, state, verdict)
                case StartPlan():
                    decision = research.start_plan(settings, state, clock)
                case _:
                    assert_never(decision)

    # ----------------------------------------------------------------- results
    def _expected(self, state: RequestState, result: StepResult) -> bool:
        """Only the answer to the command the saga is waiting on counts; others are stale."""
        pending = state.pending
        if pending is None or result.attempt != state.attempt or pending.step != result.step:
            return False
        if result.step == Step.SEARCH.value and result.channel:
            return search.awaited(pending, result) is not None
        return pending.command_ids.get(result.step) == result.command_id

    def _on_result(self, state: RequestState, result: StepResult, clock: Clock) -> Decision:
        """Which phase takes a result the saga was waiting on."""
        settings = self.settings
        if isinstance(result, SearchResult):  # each channel it answers for failed or not
            if search.classifying(state):
                return classify.on_classified_search(state, result)
            return search.on_searched(state, result)
        if isinstance(result, StepFailure) or result.status is StepStatus.FAILED:
            return self._on_step_failed(state, result, clock)
        if isinstance(result, ClassifyResult):
            return classify.on_classified(state, result)
        if isinstance(result, FuseResult):
            return TakeFused(result)
        if isinstance(result, GenerateResult):
            return generate.on_generated(settings, state, result, clock)
        if isinstance(result, ToolResult):
            return generate.on_tools(settings, state, result, clock)
        if isinstance(result, CriticResult):
            return TakeCritique(result)
        if isinstance(result, PlanResult):
            return research.on_planned(
                settings, state, result.sub_questions, result.planner, clock, result.broad
            )
        return Transition(None)

    def _on_step_failed(self, state: RequestState, result: StepResult, clock: Clock) -> Decision:
        """Which phase takes a failed step: most go on without it; one with no way on ends
        the request."""
        settings = self.settings
        message = result.error.message if result.error else "step failed"
        step = result.step
        if step == Step.CLASSIFY.value or search.classifying(state):
            return classify.degrade(state, [])
        if step == Step.SEARCH.value and result.channel is not None:
            return search.on_failed(state, result, message)
        if step == Step.CRITIC.value:
            return endings.complete(state, [], critic_note=f"critic failed: {message}")
        if step == Step.TOOL.value:
            return generate.tool_failed(settings, state, "failed", message, clock)
        if step == Step.PLAN.value:
            return research.on_planned(settings, state, [], "fallback", clock)
        if step == Step.GENERATE.value and state.fused:
            return endings.passages_answer(state, f"generation failed: {message}")
        return endings.finish_error(
            state, RequestStatus.FAILED, f"{step}_failed", message, _STEP_PHASE.get(step)
        )

    def _on_deadline(self, state: RequestState, step: str, clock: Clock) -> Decision:
        """Which phase takes the pending step's deadline: as for a failed step, most go on
        without it."""
        settings = self.settings
        if step == Step.CLASSIFY.value or search.classifying(state):
            return classify.on_deadline(state)
        if step == Step.SEARCH.value:
            return search.on_deadline(settings, state)
        if step == Step.CRITIC.value:
            messages = [moves.phase(state, Phase.CRITIC, PhaseStatus.FAILED, reason="deadline")]
            return endings.complete(state, messages, critic_note="critic did not answer in time")
        if step == Step.TOOL.value:
            return generate.tool_failed(settings, state, "deadline", "the tool timed out", clock)
        if step == Step.PLAN.value:  # no plan in time: research the question itself
            return research.on_planned(settings, state, [], "fallback", clock)
        if step == lineage.RESEARCH_STEP:
            return research.wait_over(settings, state)
        if step == Step.GENERATE.value and state.fused:
            return endings.passages_answer(state, "the generator did not answer in time")
        return endings.finish_error(
            state,
            RequestStatus.TIMED_OUT,
            f"{step}_timeout",
            f"the {step} step did not answer in time",
            _STEP_PHASE.get(step),
        )


_STEP_PHASE: dict[str, Phase] = {
    Step.CLASSIFY.value: Phase.INTENT_CLASSIFICATION,
    Step.FUSE.value: Phase.FUSION,
    Step.GENERATE.value: Phase.GENERATION,
    Step.CRITIC.value: Phase.CRITIC,
    Step.TOOL.value: Phase.TOOL_EXECUTION,
    Step.PLAN.value: Phase.RESEARCH_PLAN,
    lineage.RESEARCH_STEP: Phase.RESEARCH_STEP,
}
