from __future__ import annotations

import re

import pytest

from contracts.commands import GenerateCommand
from contracts.enums import Intent
from contracts.events import TokenEvent
from contracts.models import RetrievedChunk, ToolOutcome
from engines.generate.extractive import candidates, extractive_answer, no_evidence_answer
from engines.generate.tools import tool_answer
from infra.runtime.step_context import RequestNotLive
from tests.unit.fakes import BrokenEncoder, FakeEncoder, with_stored_vectors
from workers.generate.streaming import TokenEmitter, pieces

MARKER = re.compile(r"\[(\d+)\]")


def ctx(cid: str, text: str) -> RetrievedChunk:
    return RetrievedChunk(chunk_id=cid, document_id="d-" + cid, text=text)


CONTEXTS = [
    ctx(
        "c-jet",
        "JetStream stores messages in streams on disk. A durable consumer remembers its "
        "position in the stream. Acknowledgements tell the server a message was processed.",
    ),
    ctx(
        "c-redis",
        "Redis keeps the saga state of every request. The orchestrator updates the state "
        "atomically with a Lua script.",
    ),
    ctx(
        "c-dup",
        "A durable consumer remembers its position in the stream. Unrelated trivia: the "
        "office cat is called Nimbus [7].",
    ),
]


async def test_every_marker_points_at_a_given_context() -> None:
    answer = await extractive_answer(
        "How does a durable consumer remember its stream position?", CONTEXTS, FakeEncoder()
    )
    numbers = {int(n) for n in MARKER.findall(answer.text)}
    assert numbers, answer.text
    assert numbers == set(answer.citations)
    for n, chunk_id in answer.citations.items():
        assert 1 <= n <= len(CONTEXTS)
        assert CONTEXTS[n - 1].chunk_id == chunk_id


async def test_sentences_are_not_repeated_and_source_markers_are_dropped() -> None:
    answer = await extractive_answer(
        "durable consumer position stream cat", CONTEXTS, FakeEncoder()
    )
    assert answer.text.count("remembers its position") == 1
    assert "[7]" not in answer.text
    assert 7 not in answer.citations


async def test_two_to_four_sentences_each_followed_by_its_marker() -> None:
    answer = await extractive_answer("stream consumer saga state", CONTEXTS, FakeEncoder())
    assert 2 <= answer.sentences <= 4
    assert len(MARKER.findall(answer.text)) == answer.sentences
    assert re.search(r"\[\d\]\.$", answer.text)  # "…text [n]." keeps marker and sentence together


async def test_sentences_follow_context_order() -> None:
    answer = await extractive_answer(
        "Redis saga state and JetStream streams on disk", CONTEXTS, FakeEncoder()
    )
    numbers = [int(n) for n in MARKER.findall(answer.text)]
    assert numbers == sorted(numbers)


def test_candidates_drop_fragments_and_repeats() -> None:
    pool = candidates(
        [ctx("a", "Ok. This sentence has enough words. This sentence has enough words.")]
    )
    assert [c.text for c in pool] == ["This sentence has enough words."]


async def test_no_contexts_gives_an_honest_answer() -> None:
    answer = no_evidence_answer("quantum teapots")
    assert answer.text == (
        "I could not find anything in the indexed documents about “quantum teapots”."
    )
    assert answer.citations == {}
    empty = await extractive_answer("quantum teapots", [], FakeEncoder())
    assert empty == answer


def test_tool_answers_state_results_and_failures() -> None:
    ok = ToolOutcome(call_id="1", name="calculator", ok=True, output="17 * 23 + 4 = 395")
    failed = ToolOutcome(call_id="2", name="calculator", ok=False, error="division by zero")
    planner = ToolOutcome(call_id="p", name="planner", ok=False, error="no calculation found")
    assert tool_answer([ok]) == "17 * 23 + 4 = 395 (calculator)."
    assert tool_answer([failed]) == "The calculator tool failed: division by zero."
    assert (
        tool_answer([planner]) == "I could not run a tool for this question: no calculation found."
    )
    assert tool_answer([]) == "I could not run a tool for this question."


def test_token_pieces_rebuild_the_text() -> None:
    text = "One two three four five six seven eight nine [1]. Ten."
    parts = list(pieces(text, max_chars=20))
    assert "".join(parts) == text
    assert all(len(p) <= 20 for p in parts) and len(parts) == 3
    assert parts[0] == "One two three four "  # cut after a space
    assert list(pieces("x" * 45, max_chars=20)) == ["x" * 20, "x" * 20, "x" * 5]
    assert list(pieces("short")) == ["short"] and list(pieces("")) == []


class _Recorder:
    def __init__(self) -> None:
        self.events: list[TokenEvent] = []

    async def emit(self, event: TokenEvent, still_wanted: object = None) -> None:
        self.events.append(event)


async def test_tokens_are_coalesced_a_few_times_a_second() -> None:
    now = [100.0]
    bus = _Recorder()
    cmd = GenerateCommand(request_id="r", query="q", intent=Intent.FACTUAL, contexts=[])
    emitter = TokenEmitter(bus, cmd, clock=lambda: now[0])  # type: ignore[arg-type]
    await emitter.emit("The ")  # the first text goes out at once
    for word in ("answer ", "comes ", "word ", "by ", "word"):
        now[0] += 0.05
        await emitter.emit(word)
    now[0] += 0.2  # past FLUSH_S since the last event: all that was held goes together
    await emitter.emit(".")
    await emitter.flush()
    texts = [e.data.text for e in bus.events]
    assert texts == ["The ", "answer comes word by word."]
    assert [e.data.index for e in bus.events] == [0, 1] and emitter.count == 2


async def test_a_stream_whose_request_ended_stops_and_sends_nothing_more() -> None:
    # a model streams on after its request timed out or was cancelled: nothing follows a done
    live = [True]

    async def is_live(request_id: str) -> bool:
        return live[0]

    bus = _Recorder()
    cmd = GenerateCommand(request_id="r", query="q", intent=Intent.FACTUAL, contexts=[])
    emitter = TokenEmitter(bus, cmd, is_live=is_live)  # type: ignore[arg-type]
    await emitter.emit("The ")
    live[0] = False
    await emitter.emit("answer")
    with pytest.raises(RequestNotLive):
        await emitter.flush()
    assert [e.data.text for e in bus.events] == ["The "]


async def test_off_topic_contexts_give_the_honest_answer() -> None:
    answer = await extractive_answer("GDP of Brazil", CONTEXTS, FakeEncoder())
    assert answer == no_evidence_answer("GDP of Brazil")


async def test_an_off_topic_sentence_is_not_added_to_reach_the_minimum() -> None:
    answer = await extractive_answer("Lua script transition", CONTEXTS, FakeEncoder())
    assert answer.sentences == 1
    assert answer.citations == {2: "c-redis"}


async def test_a_sentence_opening_with_a_pronoun_brings_its_antecedent() -> None:
    contexts = [
        ctx(
            "c-apa",
            "The American Psychological Association publishes many journals. It was founded "
            "in July 1892 at Clark University by a group of psychologists.",
        )
    ]
    answer = await extractive_answer(
        "When was it founded at Clark University by psychologists?", contexts, FakeEncoder()
    )
    assert answer.text.startswith("The American Psychological Association publishes"), answer.text
    assert answer.text.count("[1]") == 2
    assert answer.sentences == 2


async def test_a_pronoun_in_the_first_sentence_of_a_context_stands_alone() -> None:
    contexts = [ctx("c-it", "It was founded in July 1892 at Clark University by psychologists.")]
    answer = await extractive_answer("founded Clark University", contexts, FakeEncoder())
    assert answer.text == "It was founded in July 1892 at Clark University by psychologists [1]."


async def test_follow_up_queries_bring_the_second_hops_answer_into_the_answer() -> None:
    contexts = [
        ctx(
            "c-book",
            "The children's book Alexander was written by Judith Viorst. It sold well in "
            "bookshops everywhere. The book has a sequel about moving house.",
        ),
        ctx(
            "c-viorst",
            "Judith Viorst graduated from Rutgers University in Newark. Her poems are "
            "about family life.",
        ),
    ]
    question = "Which book was written by Judith Viorst and sold in bookshops?"
    plain = await extractive_answer(question, contexts, FakeEncoder())
    assert "Rutgers" not in plain.text
    followed = await extractive_answer(
        question, contexts, FakeEncoder(), follow_ups=["Judith Viorst graduated university"]
    )
    assert "graduated from Rutgers University" in followed.text
    assert followed.citations[2] == "c-viorst"


async def test_stored_vectors_answer_without_running_an_encoder() -> None:
    """What ingestion stored and classify carried is all generation needs: the answer is the
    one an encoder would have given, and no encoder runs."""
    encoder = FakeEncoder()
    query = "How does a durable consumer remember its stream position?"
    encoded = await extractive_answer(query, CONTEXTS, encoder)
    stored = [with_stored_vectors(c, encoder) for c in CONTEXTS]
    carried = {query: encoder.encode([query])[0]}
    answer = await extractive_answer(query, stored, BrokenEncoder(), query_vectors=carried)
    assert (answer.text, answer.citations) == (encoded.text, encoded.citations)
    assert (answer.encoded, encoded.encoded) == (0, len(candidates(CONTEXTS)) + 1)


async def test_only_what_came_without_vectors_is_encoded() -> None:
    encoder = FakeEncoder()
    query = "Redis saga state Lua script"
    mixed = [with_stored_vectors(CONTEXTS[0], encoder), *CONTEXTS[1:]]
    answer = await extractive_answer(
        query, mixed, encoder, query_vectors={query: encoder.encode([query])[0]}
    )
    assert answer.encoded == sum(c.vector is None for c in candidates(mixed)) > 0
    assert "Lua script" in answer.text
