"""The saga's search fan-out and fan-in: pure decisions, like the rest of the saga
(`orchestrator.saga` runs them).

An attempt searches each of its queries (the first, and any follow-ups a decomposing critic
asked for) in every channel its intent weighs above 0, plus memory in a conversation. With
`RAGBUS_SEARCH_BATCH` (the default) a query's document channels go to the search worker as
one command (`SearchCommand.also`) and come back as one result that answers for each, so a
query's search is one command, one result and one transition; memory is always its own
command, to the memory worker. When that one command is all the attempt searches (one query,
no memory, not a retrieval answer), it also asks the worker to fuse (`SearchCommand.fuse`,
`RAGBUS_FUSE_WITH_SEARCH`), and its result's fused list moves the request on to generation
without a fuse step. A question asked for an answer outside a conversation skips the
classify step (`RAGBUS_CLASSIFY_WITH_SEARCH`): its first search names every document channel
and asks the worker to classify first (`start_classifying`, `on_classified`); until its
answer the request has no intent (`classifying`). Each awaited (channel, query) is a key of
the pending step (`search_key`), mapped to the command that answers for it. A channel that
failed or missed the search deadline is reported and left out; fusion starts when no key is
left. A command of several channels carries that deadline (`SearchCommand.deadline_at`): its
worker drops a channel that misses it and answers for the others, so one wedged channel
does not take the rest with it; the saga's deadline stays the backstop.
"""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.commands import (
    SKIPPED_BY_WEIGHT,
    ClassifySpec,
    FuseSpec,
    SearchCommand,
    parse_search_key,
    search_key,
    weighed,
)
from contracts.enums import (
    CHANNEL_PHASE,
    DOCUMENT_CHANNELS,
    Channel,
    PhaseStatus,
    RequestStatus,
    Step,
    StepStatus,
)
from contracts.models import ChannelReport, RetrievedChunk
from contracts.results import CHANNEL_TIMED_OUT, ChannelOutcome, Fused, SearchResult, StepResult
from infra.retrieval.intent_profiles import PRIOR
from infra.settings import Settings
from orchestrator import moves
from orchestrator.handoffs import Decision, StartFuse, TakeFused
from orchestrator.moves import Clock
from orchestrator.state import PendingStep, RequestState
from orchestrator.transition import Outgoing, Transition


def _reset(state: RequestState) -> None:
    state.status = RequestStatus.SEARCHING
    state.channel_results = {}
    state.claimed_results = {}
    state.channel_reports = {}
    state.sub_results = [{} for _ in state.search_queries[1:]]


def _no_memory(state: RequestState) -> None:
    """Not a phase of a request outside a conversation: the report says why, and the stream
    is spared an event per request."""
    state.channel_reports[Channel.MEMORY] = ChannelReport(
        channel=Channel.MEMORY, status="skipped", reason="no session"
    )


def classifies(settings: Settings, state: RequestState) -> bool:
    """Whether the request's first search classifies its question too (`ClassifySpec`): a
    question asked for an answer, outside a conversation (no rewrite, no memory channel), as
    one command that searches and fuses every document channel."""
    return (
        settings.classify_with_search
        and settings.search_batch
        and settings.fuse_with_search
        and state.mode == "answer"
        and not moves.has_memory(settings, state)
        and len(state.search_queries) == 1
        and not state.carried
    )


def classifying(state: RequestState) -> bool:
    """The request waits on a search that classifies (no intent yet while searching)."""
    return (
        state.intent is None
        and state.pending is not None
        and state.pending.step == Step.SEARCH.value
    )


def start_classifying(settings: Settings, state: RequestState, clock: Clock) -> Transition:
    """The first search of a request that `classifies`: one command for every document
    channel, awaited for each; the worker classifies the question, answers for the channels
    its intent weighs and fuses them with its weights (the prior's stand in the command until
    then). Its deadline has the classify step's time as well."""
    _reset(state)
    _no_memory(state)
    awaited: dict[str, str] = {}
    fuse = _fuse_with(settings, state, dict(PRIOR))
    channels = [c for c in Channel if c in DOCUMENT_CHANNELS]
    classify = ClassifySpec(intent_override=state.intent_override)
    searched_by = clock.now + settings.classify_timeout_s + settings.search_timeout_s
    messages = _commands(state, 0, [channels], awaited, searched_by, fuse, classify)
    timeout = settings.classify_timeout_s + settings.search_timeout_s + settings.fuse_timeout_s
    state.pending = moves.pending(Step.SEARCH, awaited, timeout, clock)
    return moves.moved(state, messages)


def on_classified(state: RequestState, res: SearchResult) -> Decision:
    """A classifying search answered, its classification in the state: the channels the
    intent does not weigh are skipped (the worker sent their phase events), the others are
    answered for as by any search."""
    assert state.pending is not None
    searched = set(weighed(state.weights, DOCUMENT_CHANNELS))
    for key in _keys_of(state.pending, res.command_id):
        channel = parse_search_key(key)[0]
        if channel not in searched:
            state.pending.command_ids.pop(key)
            state.channel_reports[channel] = ChannelReport(
                channel=channel, status="skipped", reason=SKIPPED_BY_WEIGHT
            )
    return on_searched(state, res)


def start(
    settings: Settings, state: RequestState, clock: Clock, messages: list[Outgoing]
) -> Decision:
    """The attempt's search: a command per query and group of channels; fusion at once when
    no channel is to be searched."""
    _reset(state)
    awaited: dict[str, str] = {}
    searches: dict[int, list[Channel]] = {}  # query index -> the channels that search it
    weights = set(weighed(state.weights, Channel))
    for channel in Channel:
        if channel is Channel.MEMORY and not moves.has_memory(settings, state):
            _no_memory(state)
            continue
        if channel not in weights and state.mode != "retrieve":
            state.channel_reports[channel] = ChannelReport(
                channel=channel, status="skipped", reason=SKIPPED_BY_WEIGHT
            )
            messages.append(
                moves.phase(
                    state,
                    CHANNEL_PHASE[channel],
                    PhaseStatus.SKIPPED,
                    reason=SKIPPED_BY_WEIGHT,
                )
            )
            continue
        for index in range(len(state.search_queries)):
            searches.setdefault(index, []).append(channel)
    fuse = _fuse_spec(settings, state, searches)
    searched_by = clock.now + settings.search_timeout_s
    for index, channels in searches.items():
        groups = _groups(settings, channels)
        messages.extend(_commands(state, index, groups, awaited, searched_by, fuse))
    timeout = settings.search_timeout_s
    if fuse is not None:  # the one command fuses too: its deadline has the fuse step's time
        timeout += settings.fuse_timeout_s
    state.pending = moves.pending(Step.SEARCH, awaited, timeout, clock)
    if not awaited:
        return StartFuse(messages)
    return moves.moved(state, messages)


def _fuse_spec(
    settings: Settings, state: RequestState, searches: dict[int, list[Channel]]
) -> FuseSpec | None:
    """What the attempt's search command fuses with, when it is the attempt's only command:
    one query, no prior list to add to, document channels that go as one command; else None."""
    if not settings.fuse_with_search or state.mode == "retrieve" or state.carried:
        return None
    if list(searches) != [0] or not DOCUMENT_CHANNELS.issuperset(searches[0]):
        return None  # several queries, or the memory channel: its own command, its own worker
    if len(_groups(settings, searches[0])) != 1:
        return None
    return _fuse_with(settings, state, state.weights)


def _fuse_with(settings: Settings, state: RequestState, weights: dict[Channel, float]) -> FuseSpec:
    """The fuse step's parameters for the attempt's one command, fusing by `weights`; the
    question goes along only where the searched query is another (a reranker orders by it)."""
    question = state.question
    return FuseSpec(
        weights=weights,
        top_k=state.top_k,
        rrf_k=settings.rrf_k,
        fusion=settings.fusion,
        question=question if question != state.search_queries[0] else None,
    )


def _groups(settings: Settings, channels: list[Channel]) -> list[list[Channel]]:
    """A query's channels as commands: the document channels together in one
    (`RAGBUS_SEARCH_BATCH`), memory on its own."""
    documents = [c for c in channels if c in DOCUMENT_CHANNELS]
    if settings.search_batch and len(documents) > 1:
        return [documents, *([c] for c in channels if c not in DOCUMENT_CHANNELS)]
    return [[c] for c in channels]


def _commands(
    state: RequestState,
    index: int,
    groups: list[list[Channel]],
    awaited: dict[str, str],
    searched_by: float,
    fuse: FuseSpec | None,
    classify: ClassifySpec | None = None,
) -> list[Outgoing]:
    """The commands that search one query, one per group of channels (`_groups`); each
    awaited channel keyed to its command. `fuse` is set only where that one command is all the
    attempt searches (`_fuse_spec`). A command of several channels (or one that classifies)
    drops one that has not answered by `searched_by` and answers for the others
    (`SearchCommand.deadline_at`)."""
    query = state.search_queries[index]
    deadline_at = datetime.fromtimestamp(searched_by, UTC)
    messages = []
    for own, *also in groups:
        vector_read = any(c.reads_query_vector for c in (own, *also))
        cmd = SearchCommand(
            **moves.corr(state),
            channel=own,
            also=also,
            query=query,
            namespaces=state.namespaces,
            top_k=state.channel_top_k,
            query_vector=moves.vector_of(state, query) if vector_read else None,
            session_id=state.session_id,
            filter=state.filter,
            reader=state.reader,
            # a retrieval answer shows the channels' rankings: they come back inline
            claim_ranking=state.mode != "retrieve",
            fuse=fuse,
            classify=classify,
            deadline_at=deadline_at if also or classify else None,
        )
        for channel in (own, *also):
            awaited[search_key(channel, index)] = cmd.event_id
        messages.append(moves.command(cmd, Step.SEARCH, own))
    return messages


def _answered(
    state: RequestState,
    key: str,
    report: ChannelReport,
    chunks: list[RetrievedChunk],
    claim: str | None,
) -> None:
    """One channel answered for one of the attempt's queries."""
    assert state.pending is not None
    state.pending.command_ids.pop(key)
    channel, index = parse_search_key(key)
    if index == 0:  # the reports describe the attempt's first query
        state.channel_reports[channel] = report
    if report.status != "completed":
        return
    if claim:
        state.claimed_results[key] = claim
    else:
        results = state.channel_results if index == 0 else state.sub_results[index - 1]
        results[channel] = chunks


def _fan_in(state: RequestState, fused: Fused | None = None) -> Decision:
    """Fuse once every awaited channel has answered, unless the search worker did."""
    assert state.pending is not None
    if state.pending.command_ids:
        return moves.moved(state, [])
    if fused is not None:
        return TakeFused(fused)
    return StartFuse()


def on_deadline(settings: Settings, state: RequestState) -> Decision:
    """The search deadline: the channels still awaited are reported and left out."""
    assert state.pending is not None
    messages: list[Outgoing] = []
    reason = f"no answer within {settings.search_timeout_s:g}s"
    for key in list(state.pending.command_ids):
        channel, index = parse_search_key(key)
        if index == 0:
            state.channel_reports[channel] = ChannelReport(
                channel=channel, status="timed_out", reason=reason
            )
        messages.append(
            moves.phase(
                state,
                CHANNEL_PHASE[channel],
                PhaseStatus.FAILED,
                reason=reason,
                dropped=True,
                query=state.search_queries[index],
            )
        )
    state.pending.command_ids.clear()
    return StartFuse(messages)


def on_searched(state: RequestState, res: SearchResult) -> Decision:
    """A search command answered for its own channel and any further ones it searched."""
    assert state.pending is not None and res.channel is not None
    own = ChannelOutcome.model_construct(
        channel=res.channel,
        status=res.status,
        error=res.error,
        chunks=res.chunks,
        ranking_claim=res.ranking_claim,
        count=res.count,
        duration_ms=res.duration_ms,
    )
    keys = {parse_search_key(k)[0]: k for k in _keys_of(state.pending, res.command_id)}
    for outcome in (own, *res.also):
        key = keys.get(outcome.channel)
        if key is None or key not in state.pending.command_ids:
            continue  # a channel the saga did not ask this command for
        if outcome.status is StepStatus.FAILED:
            reason = outcome.error.message if outcome.error else "step failed"
            # a channel its worker dropped at the command's deadline is reported as the
            # saga's own deadline reports one
            dropped = outcome.error is not None and outcome.error.code == CHANNEL_TIMED_OUT
            report = _failed(outcome.channel, reason, outcome.duration_ms, dropped)
        else:
            report = ChannelReport(
                channel=outcome.channel,
                status="completed",
                count=max(outcome.count, len(outcome.chunks)),
                duration_ms=outcome.duration_ms,
            )
        _answered(state, key, report, outcome.chunks, outcome.ranking_claim)
    if res.query_vector:
        index = parse_search_key(keys[res.channel])[1]
        state.query_vectors[state.search_queries[index]] = res.query_vector
    return _fan_in(state, res.fused)


def on_failed(state: RequestState, result: StepResult, message: str) -> Decision:
    """A search command failed as a whole: every channel it searched failed with it."""
    assert state.pending is not None
    for key in _keys_of(state.pending, result.command_id):
        report = _failed(parse_search_key(key)[0], message, result.duration_ms)
        _answered(state, key, report, [], None)
    return _fan_in(state)


def _failed(
    channel: Channel, reason: str, duration_ms: float, timed_out: bool = False
) -> ChannelReport:
    return ChannelReport(
        channel=channel,
        status="timed_out" if timed_out else "failed",
        reason=reason,
        duration_ms=duration_ms or None,
    )


def _keys_of(pending: PendingStep, command_id: str) -> list[str]:
    """The pending search keys one command answers (several when it searched several)."""
    return [key for key, awaited in pending.command_ids.items() if awaited == command_id]


def awaited(pending: PendingStep, result: StepResult) -> str | None:
    """The pending key of the search `result` answers, or None when it answers none."""
    for key, command_id in pending.command_ids.items():
        if command_id == result.command_id and parse_search_key(key)[0] == result.channel:
            return key
    return None
