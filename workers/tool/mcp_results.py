"""An MCP tool's result as the text a tool outcome carries.

Text parts are joined, one a line; with no text, the structured content is its JSON; images,
audio and resources are described in a line each (`[image/png, 1234 bytes]`), their bytes
left out. The whole is cut at the server's `max_result_chars` with a note saying so. A result
the server marks `isError` is a failed call (`ToolError`), its text the reason.
"""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types

from workers.tool.registry import ToolError

ERROR_CHARS = 2000
"""The most of a failed call's text kept as its error."""


def _base64_bytes(data: str) -> int:
    """How many bytes a base64 text decodes to (without decoding it)."""
    data = data.strip()
    return max(0, len(data) * 3 // 4 - data[-2:].count("="))


def _resource_line(resource: types.TextResourceContents | types.BlobResourceContents) -> str:
    mime = resource.mime_type or "unknown type"
    if isinstance(resource, types.TextResourceContents):
        size = f"{len(resource.text):,} characters"
    else:
        size = f"{_base64_bytes(resource.blob):,} bytes"
    return f"[resource {resource.uri}, {mime}, {size}]"


def describe(block: Any) -> str:
    """One content block as text: a text part as itself, anything else in brackets."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.mime_type}, {_base64_bytes(block.data):,} bytes]"
    if isinstance(block, types.EmbeddedResource):
        return _resource_line(block.resource)
    if isinstance(block, types.ResourceLink):
        mime = f", {block.mime_type}" if block.mime_type else ""
        return f"[resource link {block.uri} ({block.name}{mime})]"
    return f"[{getattr(block, 'type', type(block).__name__)} content]"


def cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n[result cut at {max_chars:,} of {len(text):,} characters]"


def result_text(result: types.CallToolResult, max_chars: int) -> str:
    """The result as text, cut at `max_chars`; `ToolError` when the server says it failed."""
    lines = [describe(block) for block in result.content]
    has_text = any(isinstance(block, types.TextContent) for block in result.content)
    if not has_text and result.structured_content is not None:
        structured = json.dumps(result.structured_content, ensure_ascii=False, default=str)
        lines.insert(0, structured)
    text = "\n".join(lines)
    if result.is_error:
        raise ToolError(cut(text.strip(), ERROR_CHARS) or "the tool failed and gave no reason")
    return cut(text, max_chars)
