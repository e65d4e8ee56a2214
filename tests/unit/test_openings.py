"""A fused list carries the openings of its first `FUSED_OPENINGS` passages only (the answer
quotes those when generation fails); the generator sends the openings of the others it cites
(`GenerateResult.openings`), and the answer's citations show them as before."""

from __future__ import annotations

from contracts.commands import FuseCommand, GenerateCommand
from contracts.enums import Intent
from contracts.events import AnswerEvent
from contracts.limits import FUSED_OPENINGS
from contracts.models import RetrievedChunk
from contracts.results import FuseResult
from infra.runtime.claims import opening
from orchestrator.answer import FALLBACK_PASSAGES, passages_draft
from tests.unit.fakes import MemoryClaims
from tests.unit.saga_support import Run
from workers.generate.router import cited_openings

PASSAGES = [
    RetrievedChunk(chunk_id=f"c{n}", document_id=f"d{n}", text=f"Passage {n} says a thing. " * 20)
    for n in range(1, 7)
]


async def test_only_the_first_passages_keep_their_opening_on_the_bus() -> None:
    claims = MemoryClaims()
    claimed = await claims.put("req-open", PASSAGES)
    assert all(c.claimed for c in claimed)
    assert [bool(c.text) for c in claimed] == [n < FUSED_OPENINGS for n in range(len(PASSAGES))]
    assert claimed[0].text == opening(PASSAGES[0].text)
    resolved = await claims.resolve("req-open", claimed)
    assert [c.text for c in resolved.chunks] == [c.text for c in PASSAGES], "whole in the store"
    assert FALLBACK_PASSAGES == FUSED_OPENINGS
    draft = passages_draft(claimed)
    assert draft is not None and list(draft[1].values()) == ["c1", "c2", "c3"]


def test_the_generator_sends_the_openings_of_cited_passages_past_the_first() -> None:
    cmd = GenerateCommand(
        request_id="req-open", query="what", intent=Intent.FACTUAL, contexts=PASSAGES
    )
    openings = cited_openings(cmd, {1: "c2", 2: "c5", 3: "c6"})
    assert openings == {"c5": opening(PASSAGES[4].text), "c6": opening(PASSAGES[5].text)}
    assert cited_openings(cmd, {1: "c1"}) == {}


async def test_a_cited_passage_past_the_first_shows_its_opening_in_the_answer() -> None:
    claimed = await MemoryClaims().put("r1", PASSAGES)
    run = Run(critique_with_generation=False)
    run.submit()
    run.classify()
    run.search_all()
    run.result(FuseResult(**run.corr(run.last(FuseCommand)), chunks=claimed))
    assert [c.text for c in run.last(GenerateCommand).contexts] == [""] * len(PASSAGES)
    run.generate(
        answer="One [1]. Five [2].",
        citations={1: "c1", 2: "c5"},
        openings={"c5": opening(PASSAGES[4].text)},
    )
    answer = run.critic()[0]
    assert isinstance(answer, AnswerEvent)
    snippets = {n: c.snippet for n, c in answer.data.citations.items()}
    assert snippets[1].startswith("Passage 1 says") and snippets[2].startswith("Passage 5 says")
