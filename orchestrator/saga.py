"""The saga's decisions: given a request's state and what just happened, what happens next.

Pure functions over `RequestState`: no I/O, so every path (late results, deadlines,
failed channels, critic retries) is unit-testable. `orchestrator.service` commits
each `Transition` atomically and publishes its messages.

States: submitted -> [classifying, unless the search worker classifies: `orchestrator.search`]
-> searching -> [fusing, unless the search worker fused] -> generating <-> tooling ->
[critiquing, unless generation judged its answer: `orchestrator.critique`] -> (retrying ->
searching ...) -> completed | failed | timed_out; any running
state -> cancelled (`on_cancelled`). A research request goes fusing -> planning ->
researching -> completed (`orchestrator.research`). How a request ends, and the helpers every
decision uses, are `orchestrator.saga_base`.
"""

from __future__ import annotations

from contracts.commands import (
    ClassifyCommand,
    FuseCommand,
    GenerateCommand,
    ToolCommand,
)
from contracts.enums import (
    Channel,
    Intent,
    Phase,
    PhaseStatus,
    RequestStatus,
    Step,
    StepStatus,
)
from contracts.models import ToolCall, ToolOutcome
from contracts.queries import ChildFinished, QueryCancelled, QuerySubmitted
from contracts.results import (
    Classified,
    ClassifyResult,
    CriticResult,
    Fused,
    FuseResult,
    GenerateResult,
    PlanResult,
    SearchResult,
    StepFailure,
    StepResult,
    ToolResult,
)
from infra.retrieval.intent_profiles import PRIOR
from orchestrator import critique, research, search
from orchestrator.saga_base import Clock, SagaBase
from orchestrator.state import RequestState
from orchestrator.store import Outgoing, Transition

FALLBACK_WEIGHTS: dict[Channel, float] = dict(PRIOR)
"""Used when classification failed or timed out: the prior, not a guess at an intent."""


class Saga(SagaBase):
    # ----------------------------------------------------------------- entry points
    def on_submitted(
        self, state: RequestState | None, msg: QuerySubmitted, clock: Clock
    ) -> Transition:
        if state is None:
            # Never recorded by the API (forged, or its state is lost): nothing to run.
            return Transition(None)
        if state.status is not RequestStatus.SUBMITTED:
            return Transition(None)  # already under way: a re-sent submission changes nothing
        if search.classifies(self, state):
            return search.start_classifying(self, state, clock)
        return self._start_classify(state, clock)

    def on_result(self, state: RequestState | None, result: StepResult, clock: Clock) -> Transition:
        if state is None or state.status.is_terminal or not self._expected(state, result):
            return Transition(None)
        if isinstance(result, SearchResult):  # each channel it answers for failed or not
            if search.classifying(state):
                return self._on_classified_search(state, result, clock)
            return search.on_searched(self, state, result, clock)
        if isinstance(result, StepFailure) or result.status is StepStatus.FAILED:
            return self._on_step_failed(state, result, clock)
        if isinstance(result, ClassifyResult):
            return self._on_classified(state, result, clock)
        if isinstance(result, FuseResult):
            return self._on_fused(state, result, clock)
        if isinstance(result, GenerateResult):
            return self._on_generated(state, result, clock)
        if isinstance(result, ToolResult):
            return self._on_tools(state, result, clock)
        if isinstance(result, CriticResult):
            return critique.on_critique(self, state, result, clock)
        if isinstance(result, PlanResult):
            return research.on_planned(
                self, state, result.sub_questions, result.planner, clock, result.broad
            )
        return Transition(None)

    def on_child(self, state: RequestState | None, msg: ChildFinished) -> Transition:
        """A research request's child ended (`orchestrator.research`)."""
        return research.on_child(self, state, msg)

    def on_cancelled(self, state: RequestState | None, msg: QueryCancelled) -> Transition:
        """Stop a request where it stands: `error` (code `cancelled`) and `done` with status
        `cancelled`. Results still on their way are ignored, as for any finished request, and
        workers skip commands of a request that is no longer live. A finished request stays as
        it finished."""
        if state is None or state.status.is_terminal:
            return Transition(None)
        phase = _STEP_PHASE.get(state.pending.step) if state.pending else None
        children = research.cancel_running_children(state)
        transition = self._finish_error(
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
            return self._finish_error(
                state,
                RequestStatus.TIMED_OUT,
                "request_timeout",
                f"the request did not finish within {self.settings.request_timeout_s:g}s",
                phase,
            )
        pending = state.pending
        if pending is None or clock.now < pending.deadline_at:
            return Transition(None)
        step = pending.step
        if step == Step.CLASSIFY.value or search.classifying(state):
            messages = [
                self._phase(
                    state,
                    Phase.INTENT_CLASSIFICATION,
                    PhaseStatus.FAILED,
                    reason="deadline",
                    fallback="balanced weights",
                )
            ]
            return self._degrade_classification(state, clock, messages)
        if step == Step.SEARCH.value:
            return search.on_deadline(self, state, clock)
        if step == Step.CRITIC.value:
            messages = [self._phase(state, Phase.CRITIC, PhaseStatus.FAILED, reason="deadline")]
            return self._complete(state, messages, critic_note="critic did not answer in time")
        if step == Step.TOOL.value:
            state.tool_results.append(
                ToolOutcome(call_id="deadline", name="tool", ok=False, error="the tool timed out")
            )
            return self._start_generate(state, clock)
        if step == Step.PLAN.value:  # no plan in time: research the question itself
            return research.on_planned(self, state, [], "fallback", clock)
        if step == research.RESEARCH_STEP:
            return research.wait_over(self, state)
        if step == Step.GENERATE.value and state.fused:
            return self._passages_answer(state, "the generator did not answer in time")
        return self._finish_error(
            state,
            RequestStatus.TIMED_OUT,
            f"{step}_timeout",
            f"the {step} step did not answer in time",
            _STEP_PHASE.get(step),
        )

    # ----------------------------------------------------------------- results
    def _expected(self, state: RequestState, result: StepResult) -> bool:
        """Only the answer to the command the saga is waiting on counts; others are stale."""
        pending = state.pending
        if pending is None or result.attempt != state.attempt or pending.step != result.step:
            return False
        if result.step == Step.SEARCH.value and result.channel:
            return search.awaited(pending, result) is not None
        return pending.command_ids.get(result.step) == result.command_id

    def _on_step_failed(self, state: RequestState, result: StepResult, clock: Clock) -> Transition:
        message = result.error.message if result.error else "step failed"
        step = result.step
        if step == Step.CLASSIFY.value or search.classifying(state):
            return self._degrade_classification(state, clock, [])
        if step == Step.SEARCH.value and result.channel is not None:
            return search.on_failed(self, state, result, message, clock)
        if step == Step.CRITIC.value:
            return self._complete(state, [], critic_note=f"critic failed: {message}")
        if step == Step.TOOL.value:
            state.tool_results.append(
                ToolOutcome(call_id="failed", name="tool", ok=False, error=message)
            )
            return self._start_generate(state, clock)
        if step == Step.PLAN.value:
            return research.on_planned(self, state, [], "fallback", clock)
        if step == Step.GENERATE.value and state.fused:
            return self._passages_answer(state, f"generation failed: {message}")
        return self._finish_error(
            state, RequestStatus.FAILED, f"{step}_failed", message, _STEP_PHASE.get(step)
        )

    def _on_classified(self, state: RequestState, res: ClassifyResult, clock: Clock) -> Transition:
        state.rewrite_method = res.rewrite_method
        if res.standalone_query and res.standalone_query != state.query:
            state.standalone_query = res.standalone_query
            state.search_queries = [res.standalone_query]
        self._classified(state, res, res.query_vector)
        if res.intent is Intent.TOOL and state.mode == "answer":
            return self._start_tool(state, [], clock)
        return self._start_search(state, clock, [])

    def _on_classified_search(
        self, state: RequestState, res: SearchResult, clock: Clock
    ) -> Transition:
        """The first search, which classified the question too (`search.start_classifying`):
        the classification first, then the channels it searched. One that came back without
        a classification failed before it made one: classification degrades, as when the
        classify step fails, and the search starts again with the prior's weights."""
        if res.classified is None:
            return self._degrade_classification(state, clock, [])
        self._classified(state, res.classified, res.query_vector)
        if res.classified.intent is Intent.TOOL and state.mode == "answer":
            return self._start_tool(state, [], clock)
        return search.on_classified(
            self, state, res.model_copy(update={"query_vector": None}), clock
        )

    @staticmethod
    def _classified(state: RequestState, found: Classified, query_vector: str | None) -> None:
        state.intent = found.intent
        state.intent_confidence = found.confidence
        state.intent_method = found.method
        state.weights = dict(found.weights) or dict(FALLBACK_WEIGHTS)
        state.query_vector = query_vector

    def _on_fused(self, state: RequestState, res: Fused, clock: Clock) -> Transition:
        """The fused list, from the fuse step or from a search worker that fused its own
        channels (`SearchResult.fused`)."""
        state.fused = res.chunks
        state.fused_claim = res.contexts_claim
        state.effective_weights = dict(res.effective_weights)
        state.channel_counts = dict(res.channel_counts)
        if state.mode == "retrieve":
            return self._complete(state, [])
        if state.mode == "research":
            return research.start_plan(self, state, clock)
        # The channels' rankings are folded into `fused` and only a retrieval answer shows
        # them: every later transition would read and write them again for nothing.
        state.channel_results = {}
        state.sub_results = []
        state.claimed_results = {}
        return self._start_generate(state, clock)

    def _on_generated(self, state: RequestState, res: GenerateResult, clock: Clock) -> Transition:
        if res.tool_calls and state.tool_rounds < self.settings.max_tool_calls:
            return self._start_tool(state, res.tool_calls, clock)
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
            return critique.on_critique(self, state, res.critique, clock)
        return critique.start_critic(self, state, clock)

    def _on_tools(self, state: RequestState, res: ToolResult, clock: Clock) -> Transition:
        state.tool_results.extend(res.outcomes)
        return self._start_generate(state, clock)

    # ----------------------------------------------------------------- steps
    def _start_classify(self, state: RequestState, clock: Clock) -> Transition:
        cmd = ClassifyCommand(
            **self._corr(state),
            query=state.query,
            intent_override=state.intent_override,
            session_id=state.session_id,
            submitted_at=state.created_at.timestamp(),
        )
        state.status = RequestStatus.CLASSIFYING
        state.pending = self._pending(
            Step.CLASSIFY,
            {Step.CLASSIFY.value: cmd.event_id},
            self.settings.classify_timeout_s,
            clock,
        )
        return self._moved(state, [self._cmd(cmd, Step.CLASSIFY)])

    def _degrade_classification(
        self, state: RequestState, clock: Clock, messages: list[Outgoing]
    ) -> Transition:
        state.intent = state.intent_override or Intent.FACTUAL
        state.intent_confidence = 0.0
        state.intent_method = "fallback"
        state.weights = dict(FALLBACK_WEIGHTS)
        if state.intent is Intent.TOOL:
            transition = self._start_tool(state, [], clock)
            transition.messages[:0] = messages
            return transition
        return self._start_search(state, clock, messages)

    def _start_search(
        self, state: RequestState, clock: Clock, messages: list[Outgoing]
    ) -> Transition:
        return search.start(self, state, clock, messages)

    def _start_fuse(
        self, state: RequestState, clock: Clock, messages: list[Outgoing]
    ) -> Transition:
        cmd = FuseCommand(
            **self._corr(state),
            query=state.question,
            weights=state.weights,
            results=state.channel_results,
            top_k=state.top_k,
            rrf_k=self.settings.rrf_k,
            fusion=self.settings.fusion,
            sub_results=state.sub_results,
            claimed_results=state.claimed_results,
            carried=state.carried,
            hydrate=state.mode != "retrieve",
        )
        state.status = RequestStatus.FUSING
        state.pending = self._pending(
            Step.FUSE, {Step.FUSE.value: cmd.event_id}, self.settings.fuse_timeout_s, clock
        )
        return self._moved(state, [*messages, self._cmd(cmd, Step.FUSE)])

    def _start_generate(self, state: RequestState, clock: Clock) -> Transition:
        follow_ups = state.search_queries if state.carried else []  # a decomposed attempt
        cmd = GenerateCommand(
            **self._corr(state),
            query=state.question,
            intent=state.intent or Intent.FACTUAL,
            **self._contexts(state),
            tool_results=state.tool_results,
            tool_rounds_left=max(0, self.settings.max_tool_calls - state.tool_rounds),
            follow_ups=follow_ups,
            query_vectors={
                text: vector
                for text in [state.question, *follow_ups]
                if (vector := self._vector_of(state, text)) is not None
            },
            critique_attempts_left=critique.attempts_for_generation(self, state, clock),
        )
        state.status = RequestStatus.GENERATING
        timeout = critique.generation_timeout(self, judged=cmd.critique_attempts_left is not None)
        state.pending = self._pending(
            Step.GENERATE, {Step.GENERATE.value: cmd.event_id}, timeout, clock
        )
        return self._moved(state, [self._cmd(cmd, Step.GENERATE)])

    def _start_tool(self, state: RequestState, calls: list[ToolCall], clock: Clock) -> Transition:
        cmd = ToolCommand(**self._corr(state), query=state.question, calls=calls)
        state.status = RequestStatus.TOOLING
        state.tool_rounds += 1
        state.pending = self._pending(
            Step.TOOL, {Step.TOOL.value: cmd.event_id}, self.settings.tool_timeout_s, clock
        )
        return self._moved(state, [self._cmd(cmd, Step.TOOL)])


_STEP_PHASE: dict[str, Phase] = {
    Step.CLASSIFY.value: Phase.INTENT_CLASSIFICATION,
    Step.FUSE.value: Phase.FUSION,
    Step.GENERATE.value: Phase.GENERATION,
    Step.CRITIC.value: Phase.CRITIC,
    Step.TOOL.value: Phase.TOOL_EXECUTION,
    Step.PLAN.value: Phase.RESEARCH_PLAN,
    research.RESEARCH_STEP: Phase.RESEARCH_STEP,
}
