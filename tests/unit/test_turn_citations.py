"""A conversation's turn keeps where its citations came from: the page and the section."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from contracts.enums import RequestStatus
from contracts.events import AnswerData
from contracts.models import Citation
from contracts.sessions import SessionTurn, TurnCitation
from orchestrator.state import RequestState
from orchestrator.turns import finished_turn


def _state(citations: dict[int, Citation]) -> RequestState:
    return RequestState(
        request_id="r1",
        query="q",
        search_queries=["q"],
        session_id="web-1",
        namespaces=["default"],
        top_k=5,
        channel_top_k=10,
        deadline_at=time.time() + 60,
        status=RequestStatus.COMPLETED,
        answer=AnswerData(content="Said [1] and [2].", citations=citations),
    )


def test_a_turn_keeps_each_citations_page_and_section() -> None:
    state = _state(
        {
            2: Citation(chunk_id="c2", document_id="notes.md", title="Notes"),
            1: Citation(
                chunk_id="c1",
                document_id="report.pdf",
                title="Report",
                page=3,
                page_label="p. 3",
                section="Methods > Sampling",
            ),
        }
    )
    turn = finished_turn(state)
    paged, plain = turn.citations
    assert (paged.n, paged.document_id, paged.page, paged.page_label, paged.section) == (
        1,
        "report.pdf",
        3,
        "p. 3",
        "Methods > Sampling",
    )
    assert (plain.n, plain.page, plain.page_label, plain.section) == (2, None, "", "")
    # and it survives the trip through the memory worker's command, as JSON
    again = SessionTurn.model_validate_json(turn.model_dump_json())
    assert again.citations == turn.citations


def test_a_long_section_is_cut_to_the_turns_bound() -> None:
    section = "Chapter " * 120  # 960 characters: a citation may carry 1000
    state = _state({1: Citation(chunk_id="c1", document_id="d", page=1, section=section)})
    [citation] = finished_turn(state).citations
    assert citation.section == section[:500]


def test_old_turns_read_back_without_a_page() -> None:
    citation = TurnCitation.model_validate({"n": 1, "title": "T", "document_id": "d"})
    assert (citation.page, citation.page_label, citation.section) == (None, "", "")
    with pytest.raises(ValidationError):
        TurnCitation(n=1, page_label="x" * 33)
    with pytest.raises(ValidationError):
        TurnCitation(n=1, page=0)
