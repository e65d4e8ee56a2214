"""An MCP tool's result as the text of a tool outcome: text joined, structured content as JSON
when there is no text, media and resources described, the whole cut with a note; an error
result is a failed call."""

from __future__ import annotations

import base64

import mcp.types as types
import pytest

from workers.tool.mcp_results import describe, result_text
from workers.tool.registry import ToolError

PNG = base64.b64encode(b"\x89PNG" + b"\x00" * 1230).decode()


def result(
    *content: object, structured: object = None, error: bool = False
) -> types.CallToolResult:
    return types.CallToolResult(
        content=list(content),  # type: ignore[arg-type]
        structured_content=structured,
        is_error=error,
    )


def text(value: str) -> types.TextContent:
    return types.TextContent(type="text", text=value)


def test_text_parts_are_joined_and_media_described() -> None:
    answer = result(
        text("Here is the image:"),
        types.ImageContent(type="image", data=PNG, mime_type="image/png"),
        types.AudioContent(
            type="audio", data=base64.b64encode(b"x" * 10).decode(), mime_type="audio/wav"
        ),
        types.EmbeddedResource(
            type="resource",
            resource=types.TextResourceContents(
                uri="file:///a.txt", text="hello", mime_type="text/plain"
            ),
        ),
        types.EmbeddedResource(
            type="resource",
            resource=types.BlobResourceContents(uri="file:///a.gz", blob=PNG),
        ),
        types.ResourceLink(
            type="resource_link", uri="file:///b.md", name="b.md", mime_type="text/markdown"
        ),
        structured={"ignored": "the text says it"},
    )
    assert result_text(answer, 1000).splitlines() == [
        "Here is the image:",
        "[image/png, 1,234 bytes]",
        "[audio/wav, 10 bytes]",
        "[resource file:///a.txt, text/plain, 5 characters]",
        "[resource file:///a.gz, unknown type, 1,234 bytes]",
        "[resource link file:///b.md (b.md, text/markdown)]",
    ]


def test_structured_content_is_the_text_when_there_is_none() -> None:
    assert result_text(result(structured={"sum": 3, "ok": "é"}), 100) == '{"sum": 3, "ok": "é"}'
    image = types.ImageContent(type="image", data=PNG, mime_type="image/png")
    assert result_text(result(image, structured=[1]), 100) == "[1]\n[image/png, 1,234 bytes]"
    assert result_text(result(), 100) == ""


def test_a_long_result_is_cut_with_a_note() -> None:
    cut = result_text(result(text("x" * 500)), 100)
    assert cut == "x" * 100 + "\n[result cut at 100 of 500 characters]"
    assert result_text(result(text("x" * 100)), 100) == "x" * 100


def test_an_error_result_is_a_failed_call_with_its_reason() -> None:
    with pytest.raises(ToolError, match=r"^no note titled 'q'$"):
        result_text(result(text("no note titled 'q'"), error=True), 100)
    with pytest.raises(ToolError, match="gave no reason"):
        result_text(result(error=True), 100)
    with pytest.raises(ToolError) as long:
        result_text(result(text("e" * 5000), error=True), 100)
    assert len(str(long.value)) < 2100


def test_an_unknown_block_is_named() -> None:
    class Odd:
        type = "hologram"

    assert describe(Odd()) == "[hologram content]"
