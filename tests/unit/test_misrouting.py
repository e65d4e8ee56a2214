"""A wrong but confident intent must not starve the answer.

The pure pieces, end to end: a summary question misread as `factual` (at high confidence)
gets factual's profile, which gives graph global — the only channel that finds the relevant
community summary — weight 0, so the saga does not even search it. The critic sees an answer
that misses the question's terms and asks to `rebalance`; the retry searches every channel
with even weights, and fusion puts the chunk in the top-k. A misreading at low confidence
never gets that far: its weights are the prior.
"""

from __future__ import annotations

from contracts.commands import FuseCommand, SearchCommand
from contracts.enums import DOCUMENT_CHANNELS, Channel, Intent, RequestStatus
from contracts.models import RetrievedChunk
from contracts.results import SearchResult
from engines.critic.scoring import Scores
from engines.critic.verdict import judge_answer
from engines.fuse.rrf import fuse
from infra.retrieval.intent_profiles import EVEN, LOW_CONFIDENCE, PRIOR, PROFILES, weights_for
from tests.unit.saga_support import Run

QUERY = "what are the main themes across the canal documents"
RELEVANT = RetrievedChunk(
    chunk_id="community-7",
    document_id="community:7",
    title="Community: disease, engineering and politics of the canal",
    text="The canal's story is one of disease, engineering and politics.",
)


def noise(channel: Channel, n: int = 20) -> list[RetrievedChunk]:
    """Plausible but unhelpful passages, each channel its own."""
    return [
        RetrievedChunk(chunk_id=f"{channel.value}-{i}", document_id=f"d{i}", text=f"passage {i}")
        for i in range(n)
    ]


def answer_channels(run: Run, found: dict[Channel, list[RetrievedChunk]]) -> set[Channel]:
    """Answer every search command of the current attempt; returns the channels searched."""
    assert run.state is not None
    attempt = run.state.attempt
    commands = [m for m in run.sent if isinstance(m, SearchCommand) and m.attempt == attempt]
    for cmd in commands:
        run.result(SearchResult(**run.corr(cmd), channel=cmd.channel, chunks=found[cmd.channel]))
    return {cmd.channel for cmd in commands}


def fused_ids(cmd: FuseCommand) -> list[str]:
    fused = fuse(cmd.results, cmd.weights, method=cmd.fusion, k=cmd.rrf_k, top_k=cmd.top_k)
    return [c.chunk_id for c in fused]


def test_a_confident_misroute_still_reaches_its_chunk_through_the_rebalance_retry() -> None:
    found = {channel: noise(channel) for channel in Channel}
    found[Channel.GRAPH_GLOBAL] = [RELEVANT, *noise(Channel.GRAPH_GLOBAL, 5)]

    run = Run(max_attempts=2)
    run.submit()
    misread = weights_for(Intent.FACTUAL, 0.93)
    assert misread[Channel.GRAPH_GLOBAL] == 0.0
    run.classify(weights=misread, intent=Intent.FACTUAL, confidence=0.93)

    # attempt 1: the zero-weight channel is skipped, so the chunk cannot be fused
    assert answer_channels(run, found) == DOCUMENT_CHANNELS - {Channel.GRAPH_GLOBAL}
    assert RELEVANT.chunk_id not in fused_ids(run.last(FuseCommand))
    run.fuse()
    run.generate(answer="Ships pass through locks [1].", citations={1: "vector-0"})

    # the critic: evidence was found, but the answer misses the question's terms
    verdict = judge_answer(
        QUERY,
        Scores(grounding=0.6, citation_validity=1.0, coverage=0.2, retrieval=0.5),
        contexts=8,
        attempts_left=1,
        accept_at=run.settings.critic_accept,
    )
    assert (verdict.verdict, verdict.strategy) == ("retry", "rebalance")
    run.critic("retry", strategy=verdict.strategy, confidence=verdict.confidence)

    # attempt 2: every channel, even weights, and the chunk is in the fused top-k
    assert run.state is not None
    assert (run.state.attempt, run.state.status) == (2, RequestStatus.SEARCHING)
    assert run.state.weights == dict(EVEN)
    assert answer_channels(run, found) == DOCUMENT_CHANNELS  # no session: no memory
    retry_fuse = run.last(FuseCommand)
    assert retry_fuse.attempt == 2
    assert retry_fuse.weights == dict(EVEN)
    ids = fused_ids(retry_fuse)
    assert RELEVANT.chunk_id in ids
    assert len(ids) == retry_fuse.top_k


def test_a_misroute_at_low_confidence_uses_the_prior_not_the_wrong_profile() -> None:
    # navigation leans on exact terms (sparse 0.5); a guess must not pull that lever
    weights = weights_for(Intent.NAVIGATION, LOW_CONFIDENCE - 0.05)
    assert weights == dict(PRIOR)
    assert weights != dict(PROFILES[Intent.NAVIGATION])

    # and with the prior, a chunk only the dense channel ranks first is still fused near the top
    found = {channel: noise(channel) for channel in Channel if weights[channel] > 0}
    found[Channel.VECTOR] = [RELEVANT, *noise(Channel.VECTOR, 19)]
    fused = fuse(found, weights, top_k=8)
    assert RELEVANT.chunk_id in [c.chunk_id for c in fused[:3]]
