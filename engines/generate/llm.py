"""LLM generation: the prompt, the tool turns of a ReAct loop, and citation hygiene.

The contexts go into the prompt numbered `[1]…[n]` in fusion order and the model is told
to cite every claim with those numbers. Its answer streams to the caller as it arrives,
through a `CitationFilter` that drops markers pointing at passages it was never given
(`[9]` with eight contexts) before they are sent; the dropped numbers are reported.

Tool rounds: while `tool_rounds_left > 0` the tools the request may use are offered: the
generate worker's catalog of what the tool workers run (built-in, plugins, and the tools of
the MCP servers the tenant is allowed), or the built-in tools' specs (`contracts.tools`).
When the model asks for tools, its calls go back to the orchestrator; the next round replays
the conversation — the assistant message carrying the `tool_calls`, then one `tool` message
per outcome — so the model sees what it asked and what came back.
All outcomes so far are replayed as one assistant turn: the saga keeps the outcomes, not
which round each came from, and one turn with every call is a valid conversation too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from contracts.commands import GenerateCommand
from contracts.models import RetrievedChunk, ToolCall, ToolOutcome
from contracts.tools import BUILTIN_TOOLS, INVALID_ARGUMENTS_KEY, ToolSpec, openai_tools
from infra.llm import LLMClient
from infra.logging import get_logger
from infra.retrieval.sentences import split_sentences

log = get_logger(__name__)

MAX_CONTEXT_CHARS: Final = 2_000
MAX_TOOL_OUTPUT_CHARS: Final = 8_000
MAX_SECTION_CHARS: Final = 200
"""A passage's section (its heading path) as the prompt names it, at most."""
MAX_MARKER_CHARS: Final = 24
"""A `[` held back longer than this is plain text, not a citation marker."""

SYSTEM_PROMPT: Final = """\
You answer questions for a retrieval system.
Rules:
- Use only the numbered context passages and the tool results you are given.
- Cite every claim with the number of the passage it comes from, in square brackets, \
e.g. "The canal opened in 1914 [2]." Cite only numbers of passages you were given.
- Tool results need no citation; say what the tool computed.
- If the passages do not contain the answer, say so plainly; never make facts up.
- When a calculation or code is needed and tools are offered, call a tool instead of \
computing in your head.
- Be concise: a few sentences."""

_MARKER: Final = re.compile(r"\[(\s*\d+(?:\s*,\s*\d+)*\s*)\]")
_PARTIAL_MARKER: Final = re.compile(r"\[[\d,\s]*$")


def _passage_heading(chunk: RetrievedChunk) -> str:
    """What the prompt says of a passage before its text: its title, and for a passage of a
    file's page, how a person names that page and the section: " (report.pdf, p. 3 —
    Methods)". A passage without a page reads as it always has (its title only)."""
    label = " ".join(chunk.page_label.split()) or (f"p. {chunk.page}" if chunk.page else "")
    if not label:
        return f" ({chunk.title})" if chunk.title else ""
    place = f"{chunk.title}, {label}" if chunk.title else label
    section = " ".join(chunk.section.split())[:MAX_SECTION_CHARS]
    return f" ({place} — {section})" if section else f" ({place})"


def _context_block(contexts: Sequence[RetrievedChunk]) -> str:
    if not contexts:
        return "(no passages were found)"
    lines = []
    for number, chunk in enumerate(contexts, start=1):
        heading = _passage_heading(chunk)
        text = " ".join(chunk.text.split())[:MAX_CONTEXT_CHARS]
        lines.append(f"[{number}]{heading} {text}")
    return "\n\n".join(lines)


def user_prompt(
    query: str, contexts: Sequence[RetrievedChunk], follow_ups: Sequence[str] = ()
) -> str:
    """The numbered passages, the follow-up searches of a decomposed attempt (they say which
    hops the passages were found for), and the question last."""
    searched = ""
    if follow_ups:
        listed = "\n".join(f"- {q}" for q in follow_ups)
        searched = f"\n\nAlso searched, for the question's later hops:\n{listed}"
    return f"Context passages:\n\n{_context_block(contexts)}{searched}\n\nQuestion: {query.strip()}"


def tool_turns(outcomes: Sequence[ToolOutcome]) -> list[dict[str, Any]]:
    """The assistant message with the tool calls, then one `tool` message per outcome."""
    if not outcomes:
        return []
    calls: list[dict[str, Any]] = []
    replies: list[dict[str, Any]] = []
    seen: set[str] = set()
    for position, outcome in enumerate(outcomes):
        call_id = outcome.call_id
        if call_id in seen:  # the saga's synthetic ids ("failed", "deadline") may repeat
            call_id = f"{call_id}-{position}"
        seen.add(call_id)
        calls.append(
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": outcome.name,
                    "arguments": json.dumps(outcome.arguments, ensure_ascii=False),
                },
            }
        )
        if outcome.ok:
            content = outcome.output.strip() or "(no output)"
        else:
            content = f"ERROR: {outcome.error or 'the tool failed'}"
        replies.append(
            {"role": "tool", "tool_call_id": call_id, "content": content[:MAX_TOOL_OUTPUT_CHARS]}
        )
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *replies]


def build_messages(cmd: GenerateCommand) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user_prompt(cmd.query, cmd.contexts, cmd.follow_ups)},
        *tool_turns(cmd.tool_results),
    ]


def offered_tools(
    cmd: GenerateCommand, specs: Sequence[ToolSpec] = BUILTIN_TOOLS
) -> list[dict[str, Any]] | None:
    """The tool specs to offer, or None once the tool budget is spent (or none is left)."""
    return openai_tools(list(specs)) if cmd.tool_rounds_left > 0 and specs else None


def _keep_numbers(body: str, valid: int) -> tuple[list[int], list[int]]:
    numbers = [int(n) for n in body.split(",")]
    kept = [n for n in numbers if 1 <= n <= valid]
    dropped = [n for n in numbers if not 1 <= n <= valid]
    return kept, dropped


@dataclass
class CitationFilter:
    """Streams text through, removing citation numbers outside `1..valid`.

    Text from an unclosed `[` on is held back until the marker closes (or clearly is not
    one), and trailing whitespace is held back so that a dropped marker takes the space
    before it along: "opened in 1914 [9]." streams out as "opened in 1914.".
    """

    valid: int
    cited: set[int] = field(default_factory=set)
    dropped: list[int] = field(default_factory=list)
    _pending: str = ""

    def feed(self, text: str) -> str:
        self._pending += text
        out: list[str] = []
        while self._pending:
            start = self._pending.find("[")
            if start < 0:
                body = self._pending
                stripped = body.rstrip()
                out.append(stripped)
                self._pending = body[len(stripped) :]
                break
            head = self._pending[:start]
            rest = self._pending[start:]
            match = _MARKER.match(rest)
            if match is None:
                if _PARTIAL_MARKER.match(rest) and len(rest) <= MAX_MARKER_CHARS:
                    # maybe a marker still arriving: emit up to the whitespace before it
                    stripped = head.rstrip()
                    out.append(stripped)
                    self._pending = head[len(stripped) :] + rest
                    break
                out.append(head + "[")
                self._pending = rest[1:]
                continue
            kept, dropped = _keep_numbers(match.group(1), self.valid)
            self.dropped.extend(dropped)
            self.cited.update(kept)
            if kept:
                out.append(head + "[" + ", ".join(str(n) for n in kept) + "]")
            else:
                out.append(head.rstrip())
            self._pending = rest[match.end() :]
        return "".join(out)

    def flush(self) -> str:
        rest, self._pending = self._pending, ""
        return rest


def check_citations(text: str, valid: int) -> tuple[str, set[int], list[int]]:
    """`text` without invalid markers, the valid numbers cited, and the dropped ones."""
    checker = CitationFilter(valid)
    clean = checker.feed(text) + checker.flush()
    return clean, checker.cited, checker.dropped


def parse_tool_calls(raw: Sequence[Any]) -> tuple[list[ToolCall], list[str]]:
    """The model's calls as bus `ToolCall`s; calls that cannot be expressed are reported."""
    calls: list[ToolCall] = []
    problems: list[str] = []
    for index, item in enumerate(raw):
        arguments: dict[str, Any]
        try:
            parsed = json.loads(item.arguments) if item.arguments.strip() else {}
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            arguments = parsed
        else:
            arguments = {INVALID_ARGUMENTS_KEY: item.arguments[:2000]}
        try:
            calls.append(
                ToolCall(id=(item.id or f"call_{index}")[:128], name=item.name, arguments=arguments)
            )
        except ValidationError:
            problems.append(f"unusable tool call name {item.name[:64]!r}")
    return calls, problems


@dataclass
class LLMAnswer:
    text: str
    citations: dict[int, str]
    dropped_citations: list[int]
    tool_calls: list[ToolCall]
    tokens: int
    sentences: int
    finish_reason: str | None
    attempts: int
    model: str
    ignored_tool_calls: int = 0
    problems: list[str] = field(default_factory=list)


class EmptyAnswer(Exception):
    """The model returned neither text nor a usable tool call."""


Emit = Callable[[str], Awaitable[None]]


async def llm_answer(
    cmd: GenerateCommand,
    client: LLMClient,
    emit: Emit,
    specs: Sequence[ToolSpec] = BUILTIN_TOOLS,
) -> LLMAnswer:
    """Ask the model, offering the tools `specs` while the budget lasts; forward its
    (citation-checked) text through `emit` as it streams."""
    checker = CitationFilter(len(cmd.contexts))
    emitted: list[str] = []

    async def on_token(delta: str) -> None:
        text = checker.feed(delta)
        if text:
            emitted.append(text)
            await emit(text)

    tools = offered_tools(cmd, specs)
    completion = await client.stream_chat(build_messages(cmd), tools=tools, on_token=on_token)
    tail = checker.flush()
    if tail.strip():  # an unclosed "[…" at the very end is text after all
        emitted.append(tail)
        await emit(tail)
    text = "".join(emitted).strip()

    calls, problems = parse_tool_calls(completion.tool_calls)
    ignored = 0
    if calls and tools is None:  # asked for tools it was not offered: the budget is spent
        ignored, calls = len(calls), []
    if not text and not calls:
        reason = "the model returned an empty answer"
        if ignored:
            reason += " (it asked for tools after the tool budget was spent)"
        elif problems:
            reason += f" ({'; '.join(problems)})"
        raise EmptyAnswer(reason)
    citations = {n: cmd.contexts[n - 1].chunk_id for n in sorted(checker.cited)}
    return LLMAnswer(
        text=text,
        citations=citations,
        dropped_citations=sorted(set(checker.dropped)),
        tool_calls=calls,
        tokens=len(emitted),
        sentences=len(split_sentences(text)) if text else 0,
        finish_reason=completion.finish_reason,
        attempts=completion.attempts,
        model=completion.model,
        ignored_tool_calls=ignored,
        problems=problems,
    )
