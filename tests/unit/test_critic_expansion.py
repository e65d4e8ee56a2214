"""Bridge terms: what the first passages name that a multi-hop question does not."""

from __future__ import annotations

from contracts.models import RetrievedChunk
from workers.critic.expansion import bridge_terms, expanded_query

QUESTION = (
    "Who was the first president of the association which published "
    "Journal of Psychotherapy Integration?"
)
FIRST_HOP = RetrievedChunk(
    chunk_id="c6",
    document_id="mq6",
    text=(
        "The Journal of Psychotherapy Integration is a peer-reviewed academic journal published "
        "by the American Psychological Association on behalf of the Society for the "
        "Exploration of Psychotherapy Integration."
    ),
)


def test_the_bridge_entity_is_proposed_and_the_questions_own_topic_is_not() -> None:
    terms = bridge_terms(QUESTION, [FIRST_HOP])
    assert terms[0] == "American Psychological Association"
    assert all("Psychotherapy Integration" not in term for term in terms)


def test_expanded_query_keeps_the_question_and_adds_the_bridge() -> None:
    expanded = expanded_query(QUESTION, [FIRST_HOP])
    assert expanded is not None
    assert expanded.startswith(QUESTION)
    assert "American Psychological Association" in expanded


def test_nothing_to_add_gives_none() -> None:
    plain = RetrievedChunk(chunk_id="x", document_id="d", text="the journal was published.")
    assert expanded_query(QUESTION, [plain]) is None
    assert expanded_query(QUESTION, []) is None
