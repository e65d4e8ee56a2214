"""Follow-up queries: the bridges the best passages name, with what they left unanswered."""

from __future__ import annotations

import pytest

from contracts.models import RetrievedChunk
from contracts.queries import MAX_QUERY_CHARS
from engines.critic.decompose import (
    MAX_FOLLOW_UPS,
    bridges,
    names_by_relation,
    sub_queries,
    unanswered,
)

QUESTION = (
    "Who was the first president of the association which published "
    "Journal of Psychotherapy Integration?"
)
FIRST_HOP = RetrievedChunk(
    chunk_id="c6",
    document_id="mq6",
    title="Journal of Psychotherapy Integration",
    text=(
        "The Journal of Psychotherapy Integration is a peer-reviewed academic journal published "
        "by the American Psychological Association on behalf of the Society for the "
        "Exploration of Psychotherapy Integration."
    ),
)


def test_the_bridge_entity_is_proposed_and_the_questions_own_topic_is_not() -> None:
    found = bridges(QUESTION, [FIRST_HOP])
    assert found[0] == "American Psychological Association"
    assert all("Psychotherapy Integration" not in name for name in found)
    assert len(found) <= MAX_FOLLOW_UPS


def test_unanswered_keeps_the_question_words_the_passage_lacks() -> None:
    assert unanswered(QUESTION, FIRST_HOP) == "first president"


def test_a_follow_up_asks_the_bridge_what_the_first_hop_left_open() -> None:
    assert sub_queries(QUESTION, [FIRST_HOP])[0] == (
        "American Psychological Association first president"
    )


def test_no_bridge_no_follow_ups() -> None:
    plain = RetrievedChunk(chunk_id="x", document_id="d", text="the journal was published.")
    assert sub_queries(QUESTION, [plain]) == []
    assert sub_queries(QUESTION, []) == []


def test_follow_ups_fit_a_query() -> None:
    long_question = "Which " + "very " * 600 + "old record did it break?"
    hop = RetrievedChunk(chunk_id="x", document_id="d", text="It was set by Usain Bolt in Berlin.")
    assert all(len(q) <= MAX_QUERY_CHARS for q in sub_queries(long_question, [hop]))


@pytest.mark.parametrize(
    ("query", "hop"),
    [
        (QUESTION, True),
        ("When was the author of Dune born?", True),
        ("What currency predated the Euro in the country Signmark is from?", True),
        ("How many Publix stores are in the state where Hello Love's performer died?", True),
        ("Breast Cancer Cells Feed on Cholesterol", False),
        ("Do Cholesterol Statin Drugs Cause Breast Cancer?", False),
        ("vitamin d deficiency and depression", False),
    ],
)
def test_only_questions_that_name_something_by_a_relation_are_decomposed(
    query: str, hop: bool
) -> None:
    assert names_by_relation(query) is hop


def test_a_topical_query_gets_no_follow_ups_even_when_its_passages_name_entities() -> None:
    passage = RetrievedChunk(
        chunk_id="x", document_id="d", text="Researchers at the Mayo Clinic measured LDL."
    )
    assert sub_queries("Breast Cancer Cells Feed on Cholesterol", [passage]) == []
