"""The generation prompt names a passage's page (and section) when it comes from a page of a
file, and reads exactly as before for every passage without one."""

from __future__ import annotations

from contracts.models import RetrievedChunk
from engines.generate.llm import user_prompt

QUERY = "What methods were used?"


def _chunk(n: int, **fields: object) -> RetrievedChunk:
    values: dict[str, object] = {"chunk_id": f"c{n}", "document_id": f"d{n}"}
    values.update(fields)
    return RetrievedChunk.model_validate(values)


def test_passages_without_a_page_give_the_prompt_they_always_did() -> None:
    contexts = [
        _chunk(1, title="Harbour notes", text="The  harbour\nopened in 1914."),
        _chunk(2, text="No title here."),
        # a section alone (a text document's heading path) changes nothing
        _chunk(3, title="Guide", section="Setup > Install", text="Run the installer."),
    ]
    assert user_prompt(QUERY, contexts) == (
        "Context passages:\n\n"
        "[1] (Harbour notes) The harbour opened in 1914.\n\n"
        "[2] No title here.\n\n"
        "[3] (Guide) Run the installer.\n\n"
        "Question: What methods were used?"
    )
    assert user_prompt(QUERY, []) == (
        "Context passages:\n\n(no passages were found)\n\nQuestion: What methods were used?"
    )


def test_a_passage_of_a_page_names_its_page_and_section() -> None:
    contexts = [
        _chunk(1, title="Harbour notes", text="The harbour opened in 1914."),
        _chunk(
            2,
            title="report.pdf",
            page=3,
            page_label="p. 3",
            section="Methods",
            text="We sampled forty wells.",
        ),
        _chunk(3, title="deck.pptx", page=2, page_label="slide 2", text="Budget."),
        _chunk(4, page=7, text="An untitled page, no label."),
    ]
    prompt = user_prompt(QUERY, contexts)
    assert "[1] (Harbour notes) The harbour opened in 1914." in prompt
    assert "[2] (report.pdf, p. 3 — Methods) We sampled forty wells." in prompt
    assert "[3] (deck.pptx, slide 2) Budget." in prompt
    assert "[4] (p. 7) An untitled page, no label." in prompt
    assert prompt.endswith("Question: What methods were used?")
