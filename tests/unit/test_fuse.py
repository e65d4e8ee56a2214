from __future__ import annotations

import pytest

from contracts.commands import FuseCommand
from contracts.enums import Channel
from contracts.models import RetrievedChunk, listed
from engines.fuse.rrf import channel_counts, effective_weights, weighted_rrf
from infra.errors import PoisonMessage
from tests.unit.fakes import MemoryClaims
from workers.fuse.router import channel_rankings

V, S, L, G = Channel.VECTOR, Channel.SPARSE, Channel.GRAPH_LOCAL, Channel.GRAPH_GLOBAL
M = Channel.MEMORY
FACTUAL = {V: 0.3, S: 0.3, L: 0.4, G: 0.0}

SIX_DIGITS = 1e-5
"""Fused scores keep six significant digits (`weighted_fusion`)."""


def chunk(cid: str, **fields: str) -> RetrievedChunk:
    return RetrievedChunk(chunk_id=cid, document_id="doc-" + cid, text=f"text {cid}", **fields)


def ranking(*ids: str) -> list[RetrievedChunk]:
    return [chunk(cid) for cid in ids]


def test_effective_weights_redistribute_an_empty_channels_share() -> None:
    weights = effective_weights(FACTUAL, {V: ranking("a"), S: [], L: ranking("b"), G: []})
    assert weights[V] == pytest.approx(0.3 / 0.7)
    assert weights[L] == pytest.approx(0.4 / 0.7)
    assert weights[S] == weights[G] == 0.0
    assert sum(weights.values()) == pytest.approx(1.0)


def test_effective_weights_are_all_zero_without_results() -> None:
    assert effective_weights(FACTUAL, {}) == dict.fromkeys(Channel, 0.0)
    assert effective_weights(FACTUAL, {V: [], S: []}) == dict.fromkeys(Channel, 0.0)


def test_zero_weight_channels_that_alone_answered_share_equally() -> None:
    summary = {V: 0.1, S: 0.0, L: 0.1, G: 0.8}
    weights = effective_weights(summary, {S: ranking("a")})
    assert weights == {V: 0.0, S: 1.0, L: 0.0, G: 0.0, M: 0.0}


def test_rrf_score_is_the_weighted_sum_of_reciprocal_ranks() -> None:
    results = {V: ranking("a", "b"), S: ranking("b", "c")}
    weights = {V: 0.75, S: 0.25, L: 0.0, G: 0.0}
    fused = weighted_rrf(results, weights, k=60, top_k=10)
    scores = {c.chunk_id: c.score for c in fused}
    assert scores["a"] == pytest.approx(0.75 / 61, rel=SIX_DIGITS)
    assert scores["b"] == pytest.approx(0.75 / 62 + 0.25 / 61, rel=SIX_DIGITS)
    assert scores["c"] == pytest.approx(0.25 / 62, rel=SIX_DIGITS)
    assert [c.chunk_id for c in fused] == ["b", "a", "c"]
    assert [c.rank for c in fused] == [1, 2, 3]


def test_rrf_uses_effective_weights_so_a_missing_channel_does_not_dilute() -> None:
    fused = weighted_rrf({V: ranking("a")}, FACTUAL, k=60, top_k=5)
    assert fused[0].score == pytest.approx(1.0 / 61, rel=SIX_DIGITS)


def test_a_chunk_found_by_several_channels_appears_once_with_all_its_ranks() -> None:
    results = {
        V: [chunk("x"), chunk("y", title="")],
        S: [chunk("z"), chunk("w"), chunk("y", title="Guide", source="guide.md")],
        L: [chunk("y"), chunk("y")],  # a channel repeating itself counts once
    }
    fused = weighted_rrf(results, {V: 0.4, S: 0.3, L: 0.3, G: 0.0}, k=60, top_k=10)
    ids = [c.chunk_id for c in fused]
    assert ids.count("y") == 1
    y = fused[ids.index("y")]
    assert y.channels == {"vector": 2, "sparse": 3, "graph_local": 1}
    assert (y.title, y.source) == ("Guide", "guide.md")  # filled from the other copy
    assert y.score == pytest.approx(0.4 / 62 + 0.3 / 63 + 0.3 / 61, rel=SIX_DIGITS)
    assert ids[0] == "y"


def test_top_k_cuts_the_fused_list() -> None:
    results = {V: ranking(*"abcdef"), S: ranking(*"fedcba")}
    fused = weighted_rrf(results, FACTUAL, top_k=3)
    assert len(fused) == 3
    assert [c.rank for c in fused] == [1, 2, 3]
    assert fused[0].score >= fused[1].score >= fused[2].score


def test_nothing_in_nothing_out() -> None:
    assert weighted_rrf({}, FACTUAL, top_k=5) == []


def test_counts_cover_every_channel() -> None:
    results = {V: ranking(*"abcde"), L: ranking("q")}
    assert channel_counts(results) == {V: 5, S: 0, L: 1, G: 0, M: 0}


async def test_claimed_rankings_join_the_carried_ones_by_query() -> None:
    claims = MemoryClaims()
    vector = await claims.put_ranking("r1", "c-vector", ranking("a", "b"))
    further = await claims.put_ranking("r1", "c-sparse-1", ranking("c"))
    cmd = FuseCommand(
        request_id="r1",
        query="q",
        weights=FACTUAL,
        results={S: ranking("x")},
        sub_results=[{}],
        claimed_results={"vector": vector, "sparse#1": further},
        top_k=5,
    )
    results, sub_results = await channel_rankings(claims, cmd)
    assert {c: [x.chunk_id for x in r] for c, r in results.items()} == {V: ["a", "b"], S: ["x"]}
    assert [[x.chunk_id for x in r] for r in sub_results[0].values()] == [["c"]]
    assert results[V][0].document_id == "doc-a"  # what the claim keeps survives the trip


async def test_a_lost_ranking_claim_is_poison() -> None:
    cmd = FuseCommand(
        request_id="r1",
        query="q",
        weights=FACTUAL,
        results={},
        claimed_results={"vector": "x"},
        top_k=5,
    )
    with pytest.raises(PoisonMessage):
        await channel_rankings(MemoryClaims(), cmd)


def scored(*pairs: tuple[str, float]) -> list[RetrievedChunk]:
    return [chunk(cid).model_copy(update={"score": score}) for cid, score in pairs]


def test_convex_fusion_weighs_each_channels_min_max_scores() -> None:
    from engines.fuse.rrf import fuse, weighted_convex

    # the vector channel's first hit is far ahead of its second; sparse barely prefers "b"
    results = {
        V: scored(("a", 0.9), ("b", 0.5), ("c", 0.4)),
        S: scored(("b", 12.0), ("a", 11.0), ("d", 2.0)),
    }
    weights = {V: 0.4, S: 0.6}
    fused = weighted_convex(results, weights, top_k=10)
    scores = {c.chunk_id: c.score for c in fused}
    assert scores["a"] == pytest.approx(0.4 * 1.0 + 0.6 * 0.9, rel=SIX_DIGITS)
    assert scores["b"] == pytest.approx(0.4 * 0.2 + 0.6 * 1.0, rel=SIX_DIGITS)
    assert scores["c"] == pytest.approx(0.0)
    assert scores["d"] == pytest.approx(0.0)
    assert [c.chunk_id for c in fused][:2] == ["a", "b"]
    assert fused[0].channels == {"vector": 1, "sparse": 2}
    # reciprocal ranks see only the order, and put "b" (first and second) ahead
    assert fuse(results, weights, method="rrf", top_k=10)[0].chunk_id == "b"
    assert fuse(results, weights, top_k=10) == fused  # convex is the default


def test_convex_fusion_gives_a_lone_or_tied_list_full_marks() -> None:
    from engines.fuse.rrf import min_max

    assert min_max(scored(("a", 0.7))) == [1.0]
    assert min_max(scored(("a", 3.0), ("b", 3.0))) == [1.0, 1.0]
    assert min_max([]) == []


def test_a_channels_completions_join_its_scores_but_not_its_ranks() -> None:
    """Score completion (`engines.search.completion`): the vector channel's score for "d",
    which only sparse listed, is normalised and weighed with the vector list; rank fusion,
    the counts and the fused chunk's `channels` see the channels' own rankings only."""
    from engines.fuse.rrf import fuse, weighted_convex

    missed = chunk("d").model_copy(update={"score": 0.7, "completion": True})
    results = {
        V: [*scored(("a", 0.9), ("b", 0.5)), missed],
        S: scored(("d", 12.0), ("a", 11.0)),
    }
    weights = {V: 0.5, S: 0.5}
    fused = {c.chunk_id: c for c in weighted_convex(results, weights, top_k=10)}
    # vector's scores span 0.5..0.9 with its completion: "d" earns (0.7 - 0.5) / 0.4 = 0.5
    assert fused["d"].score == pytest.approx(0.5 * 0.5 + 0.5 * 1.0, rel=SIX_DIGITS)
    assert fused["b"].score == pytest.approx(0.0)
    assert fused["d"].channels == {"sparse": 1} and not fused["d"].completion
    assert fused["d"].text == "text d"
    without = {
        c.chunk_id: c.score
        for c in weighted_convex({V: listed(results[V]), S: results[S]}, weights, top_k=10)
    }
    assert without["d"] == pytest.approx(0.5 * 1.0)  # 0 from the vector channel: it missed "d"
    assert channel_counts(results)[V] == 2
    by_rank = fuse(results, weights, method="rrf", top_k=10)
    assert by_rank == fuse({V: listed(results[V]), S: results[S]}, weights, method="rrf", top_k=10)


def test_a_channels_feedback_list_takes_the_place_of_its_ranking_in_score_fusion_only() -> None:
    """Pseudo-relevance feedback (`engines.search.feedback`): the vector channel's second
    search found "c" first; score fusion reads that list in place of the first one, which
    stays the channel's own for rank fusion, the counts and what a request reports."""
    from engines.fuse.rrf import fuse, weighted_convex

    fed = [
        c.model_copy(update={"feedback": True, "rank": rank})
        for rank, c in enumerate(scored(("c", 0.95), ("a", 0.6)), start=1)
    ]
    results = {V: [*scored(("a", 0.9), ("b", 0.5)), *fed], S: scored(("a", 12.0), ("d", 6.0))}
    weights = {V: 0.5, S: 0.5}
    fused = {c.chunk_id: c for c in weighted_convex(results, weights, top_k=10)}
    assert set(fused) == {"a", "c", "d"}  # "b", which only the first search found, is gone
    assert fused["c"].score == pytest.approx(0.5 * 1.0, rel=SIX_DIGITS)
    assert fused["a"].score == pytest.approx(0.5 * 0.0 + 0.5 * 1.0, rel=SIX_DIGITS)
    assert not any(c.feedback for c in fused.values())
    assert channel_counts(results)[V] == 2
    own = {V: listed(results[V]), S: results[S]}
    assert listed(results[V]) == results[V][:2]
    assert fuse(results, weights, method="rrf", top_k=10) == fuse(
        own, weights, method="rrf", top_k=10
    )


def test_the_graph_weighs_nothing_where_the_text_channels_searched_again() -> None:
    """A question that names no particular thing gets a feedback search and is fused by the
    text channels alone; the graph's chunks stay in the list, after theirs, and the weights
    the fusion reports say so. Without a feedback search the intent's weights stand."""
    from engines.fuse.rrf import question_weights, weighted_convex

    first = {V: scored(("a", 0.9), ("b", 0.5)), S: scored(("a", 12.0), ("b", 6.0))}
    graph = {L: scored(("g", 5.0), ("b", 4.0))}
    assert question_weights(FACTUAL, {**first, **graph}) == FACTUAL
    fed = [c.model_copy(update={"feedback": True}) for c in scored(("b", 0.95), ("a", 0.8))]
    results = {**first, V: [*first[V], *fed], **graph}
    weights = question_weights(FACTUAL, results)
    assert weights == {V: 0.3, S: 0.3, L: 0.0, G: 0.0}
    assert effective_weights(weights, results)[L] == 0.0
    fused = weighted_convex(results, weights, top_k=10)
    # a: 0.5·0 + 0.5·1 and b: 0.5·1 + 0.5·0 tie (a tie goes by id); g: nothing but its place
    assert [c.chunk_id for c in fused] == ["a", "b", "g"]
    assert fused[0].score == pytest.approx(0.5) and fused[-1].score == 0.0
    assert fused[-1].channels == {L.value: 1}
