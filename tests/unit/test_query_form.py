"""Keyword queries: only an intent that a word names may win over `factual`."""

from __future__ import annotations

import pytest

from contracts.enums import Intent
from engines.classify.classifier import IntentClassifier, _best, allowed_intents
from engines.classify.query_form import (
    is_keyword_query,
    keyword_intents,
    names_a_site,
    quantity_intents,
    site_names,
)
from engines.classify.rules import has_calculation_cue
from studies.site_names import ADULT, COMMON, site_name
from tests.unit.fakes import FakeEncoder


@pytest.mark.parametrize(
    ("query", "keyword"),
    [
        ("tempeh", True),
        ("panama canal locks", True),
        ("facebook login", True),
        ("best running shoes 2024", True),
        ("What is tempeh?", False),
        ("how to cook tempeh", False),  # asks: "how" first
        ("tempeh nutrition?", False),
        ("find the onboarding guide", False),  # tells
        ("is tempeh fermented", False),
        ("side effects of long term use of proton pump inhibitors in older adults", False),
    ],
)
def test_keyword_form(query: str, keyword: bool) -> None:
    assert is_keyword_query(query) is keyword


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("tempeh", set()),
        ("american diabetes association", set()),
        ("tax form 1040 pdf", {Intent.NAVIGATION}),
        ("tempeh wiki", {Intent.NAVIGATION}),
        ("best running shoes", {Intent.RECOMMENDATION}),
        ("python vs go", {Intent.COMPARISON}),
        ("tempeh recipe", {Intent.PROCEDURAL}),
        ("kubernetes install guide", {Intent.PROCEDURAL, Intent.NAVIGATION}),
        ("quarterly report highlights", {Intent.NAVIGATION, Intent.SUMMARY}),
    ],
)
def test_keyword_cues_name_intents(query: str, named: set[Intent]) -> None:
    assert keyword_intents(query) == {Intent.FACTUAL, *named}


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("facebook login", {Intent.NAVIGATION}),
        ("gmail log in", {Intent.NAVIGATION}),
        ("chase bank signin", {Intent.NAVIGATION}),
        ("spotify sign up", {Intent.NAVIGATION}),
        ("irs.gov", {Intent.NAVIGATION}),
        ("bbc.co.uk weather", {Intent.NAVIGATION}),
        ("www facebook", {Intent.NAVIGATION}),
        ("https github", {Intent.NAVIGATION}),
        ("united airlines official site", {Intent.NAVIGATION}),
        ("nasa homepage", {Intent.NAVIGATION}),
        ("facebook login fix", {Intent.NAVIGATION, Intent.PROCEDURAL}),
    ],
)
def test_a_site_in_a_keyword_query_rules_out_factual(query: str, named: set[Intent]) -> None:
    assert keyword_intents(query) == named


@pytest.mark.parametrize("query", ["youtube", "Netflix", "the guardian", "NYTimes", " ebay "])
def test_a_well_known_sites_bare_name_is_navigational(query: str) -> None:
    assert is_keyword_query(query)
    assert keyword_intents(query) == {Intent.NAVIGATION}


@pytest.mark.parametrize(
    "query",
    [
        "apple",  # a fruit before a site: ordinary words are left off the list
        "time",
        "nature",
        "youtube history",  # about the site, not the site
        "amazon rainforest",
        "new york times",  # the list holds the domain's name (nytimes)
    ],
)
def test_a_word_or_a_topic_is_no_site_name(query: str) -> None:
    assert not names_a_site(query)
    assert Intent.FACTUAL in keyword_intents(query)


def test_the_site_list_is_the_derivation_of_its_source() -> None:
    """The shipped list is what `studies.site_names` makes of its source, by its rules."""
    assert site_name("en.wikipedia.org") == "wikipedia"
    assert site_name("bbc.co.uk") == "bbc"
    assert site_name("apple.com") is None  # an ordinary word
    assert site_name("x.com") is None  # too short
    assert site_name("ouest-france.fr") == "ouestfrance"
    assert {"youtube", "wikipedia", "bbc", "github"} <= site_names()
    assert not site_names() & (COMMON | ADULT)


@pytest.mark.parametrize(
    "query",
    [
        "logarithm table",
        "log4j vulnerability",
        "signing bonus",
        "e.g. meaning",
        "sign language",
        "3.5 mm jack",
    ],
)
def test_a_word_that_merely_looks_like_a_site_is_none(query: str) -> None:
    assert Intent.FACTUAL in keyword_intents(query)


@pytest.mark.parametrize(
    ("query", "cue"),
    [
        ("windows 10 download", False),  # one number names a thing
        ("vitamin b12 deficiency", False),  # digits inside a word are no number
        ("covid-19 symptoms", False),
        ("2019 tax brackets", False),
        ("ps5 price", False),
        ("12 x 7", True),
        ("median of 3, 9, 4, 12, 7", True),
        ("days between 2024-01-15 and 2024-04-01", True),
        ("how many seconds are in 3 days", True),
    ],
)
def test_one_number_is_no_calculation_cue(query: str, cue: bool) -> None:
    assert has_calculation_cue(query) is cue


def test_a_keyword_query_goes_only_where_its_words_point() -> None:
    # what a model trained on questions reads into a bare topic
    probabilities = {
        Intent.RECOMMENDATION: 0.5,
        Intent.PROCEDURAL: 0.3,
        Intent.FACTUAL: 0.15,
        Intent.TOOL: 0.05,
    }
    # with its probability among the intents the guard leaves: the rest is ruled out
    assert _best(probabilities, allowed_intents("red onions")) == (Intent.FACTUAL, 1.0)
    assert _best(probabilities, allowed_intents("best red onions")) == (
        Intent.RECOMMENDATION,
        pytest.approx(0.5 / 0.65),
    )
    # a question keeps the model's answer; `tool` still needs a calculation cue
    assert _best(probabilities, allowed_intents("Which onions should I buy?"))[0] is (
        Intent.RECOMMENDATION
    )
    # a site's door decides: the model read "gmail login" as a topic
    with_navigation = {**probabilities, Intent.NAVIGATION: 0.05}
    assert _best(with_navigation, allowed_intents("gmail login")) == (Intent.NAVIGATION, 1.0)
    tool_first = {Intent.TOOL: 0.6, Intent.FACTUAL: 0.4}
    assert _best(tool_first, allowed_intents("What is windows 10?")) == (Intent.FACTUAL, 1.0)
    assert _best(tool_first, allowed_intents("What is 12 x 7?")) == (Intent.TOOL, 0.6)


@pytest.mark.parametrize(
    ("query", "allowed"),
    [
        ("how much does a passport cost", {Intent.FACTUAL}),
        ("How long do I cook artichokes for?", {Intent.FACTUAL}),
        ("how many bones in the human body", {Intent.FACTUAL}),
        ("how much bigger is jupiter than earth", {Intent.FACTUAL, Intent.COMPARISON}),
    ],
)
def test_a_question_that_asks_a_quantity_asks_a_fact(query: str, allowed: set[Intent]) -> None:
    assert quantity_intents(query) is not None
    # and the calculator where `has_calculation_cue` allows it ("how many" is a cue)
    assert allowed_intents(query) - {Intent.TOOL} == allowed
    assert (Intent.TOOL in allowed_intents(query)) is has_calculation_cue(query)


@pytest.mark.parametrize(
    "query",
    ["how do I cook artichokes", "how to renew a passport", "how is atp produced", "how come"],
)
def test_other_questions_keep_every_intent(query: str) -> None:
    assert quantity_intents(query) is None
    assert Intent.PROCEDURAL in allowed_intents(query)


def test_a_model_without_the_factual_label_still_answers() -> None:
    assert _best({Intent.NAVIGATION: 0.9}, allowed_intents("tempeh")) == (Intent.FACTUAL, 0.0)


async def test_zero_shot_keeps_a_bare_topic_factual() -> None:
    encoder = FakeEncoder()

    async def provide() -> FakeEncoder:
        return encoder

    classifier = IntentClassifier(provide)  # type: ignore[arg-type]
    for topic in ("red onions", "saturated fat", "airport scanners"):
        result = await classifier.classify(topic)
        assert (result.intent, result.method) == (Intent.FACTUAL, "zero_shot"), topic
        assert 0.0 < result.confidence < 1.0  # its own probability, not renormalised to 1
