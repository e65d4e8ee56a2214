"""Classification, the saga's first phase: the question's intent, and the weights its channels
search with. Pure decisions, like the rest of the saga (`orchestrator.saga` runs them).

Its own step (`cmd.classify`, `start`, `on_classified`), or the first search's
(`orchestrator.search.start_classifying`, then `on_classified_search` here). Classification
that failed or missed its deadline degrades to the prior's weights (`degrade`) and the request
goes on. Either way the request goes on to a tool round (a tool question asked for an answer)
or to its search: hand-offs (`orchestrator.handoffs`) for the saga's top to run.
"""

from __future__ import annotations

from contracts.commands import ClassifyCommand
from contracts.enums import Channel, Intent, Phase, PhaseStatus, RequestStatus, Step
from contracts.results import Classified, ClassifyResult, SearchResult
from infra.retrieval.intent_profiles import PRIOR
from infra.settings import Settings
from orchestrator import moves
from orchestrator.handoffs import Decision, SearchClassified, StartSearch, StartTool
from orchestrator.moves import Clock
from orchestrator.state import RequestState
from orchestrator.transition import Outgoing, Transition

FALLBACK_WEIGHTS: dict[Channel, float] = dict(PRIOR)
"""Used when classification failed or timed out: the prior, not a guess at an intent."""


def start(settings: Settings, state: RequestState, clock: Clock) -> Transition:
    """The classify step of its own."""
    cmd = ClassifyCommand(
        **moves.corr(state),
        query=state.query,
        intent_override=state.intent_override,
        session_id=state.session_id,
        reader=state.reader,
        submitted_at=state.created_at.timestamp(),
    )
    state.status = RequestStatus.CLASSIFYING
    state.pending = moves.pending(
        Step.CLASSIFY,
        {Step.CLASSIFY.value: cmd.event_id},
        settings.classify_timeout_s,
        clock,
    )
    return moves.moved(state, [moves.command(cmd, Step.CLASSIFY)])


def on_classified(state: RequestState, res: ClassifyResult) -> Decision:
    state.rewrite_method = res.rewrite_method
    if res.standalone_query and res.standalone_query != state.query:
        state.standalone_query = res.standalone_query
        state.search_queries = [res.standalone_query]
    _classified(state, res, res.query_vector)
    if res.intent is Intent.TOOL and state.mode == "answer":
        return StartTool()
    return StartSearch()


def on_classified_search(state: RequestState, res: SearchResult) -> Decision:
    """The first search, which classified the question too (`search.start_classifying`):
    the classification first, then the channels it searched. One that came back without
    a classification failed before it made one: classification degrades, as when the
    classify step fails, and the search starts again with the prior's weights."""
    if res.classified is None:
        return degrade(state, [])
    _classified(state, res.classified, res.query_vector)
    if res.classified.intent is Intent.TOOL and state.mode == "answer":
        return StartTool()
    return SearchClassified(res.model_copy(update={"query_vector": None}))


def on_deadline(state: RequestState) -> Decision:
    """No classification in time: reported, then degraded."""
    failed = moves.phase(
        state,
        Phase.INTENT_CLASSIFICATION,
        PhaseStatus.FAILED,
        reason="deadline",
        fallback="balanced weights",
    )
    return degrade(state, [failed])


def degrade(state: RequestState, messages: list[Outgoing]) -> Decision:
    """Go on without a classification: the override's intent (else factual), the prior's
    weights."""
    state.intent = state.intent_override or Intent.FACTUAL
    state.intent_confidence = 0.0
    state.intent_method = "fallback"
    state.weights = dict(FALLBACK_WEIGHTS)
    if state.intent is Intent.TOOL:
        return StartTool(messages=messages)
    return StartSearch(messages)


def _classified(state: RequestState, found: Classified, query_vector: str | None) -> None:
    state.intent = found.intent
    state.intent_confidence = found.confidence
    state.intent_method = found.method
    state.weights = dict(found.weights) or dict(FALLBACK_WEIGHTS)
    state.query_vector = query_vector
