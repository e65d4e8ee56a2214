"""Asking a question over HTTP and rendering its events as they arrive (`ragbus ask`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from client import RagbusClient

LONG_VALUE = 40
"""Metadata values longer than this are shown after the short ones, where the line is cut."""
_MARKS = {"completed": "[green]✓[/green]", "failed": "[red]✗[/red]", "skipped": "[dim]–[/dim]"}


@dataclass
class Found:
    """What a question's search channels found, from its phase events: how many chunks each
    channel that ran returned, and how many sources the answer cites."""

    channels: dict[str, int] = field(default_factory=dict)
    cited: int = 0

    @property
    def nothing_indexed(self) -> bool:
        """Every search channel ran and found nothing: the namespaces hold no documents (a
        dense search returns its nearest chunks whatever the question, when there are any)."""
        return bool(self.channels) and not any(self.channels.values()) and not self.cited

    def record(self, data: dict[str, Any]) -> None:
        metadata = data.get("metadata") or {}
        channel, count = metadata.get("channel"), metadata.get("count")
        if data.get("status") == "completed" and isinstance(count, int) and channel:
            self.channels[str(channel)] = self.channels.get(str(channel), 0) + count


def _phase_line(data: dict[str, Any]) -> str | None:
    """`✓ vector_search   42 ms  results=12`; None for `in_progress` (the end says more)."""
    status = data.get("status")
    if status not in _MARKS:
        return None
    duration = data.get("duration_ms")
    took = f"{duration:>8.0f} ms" if isinstance(duration, int | float) else " " * 11
    shown = [
        (key, value)
        for key, value in (data.get("metadata") or {}).items()
        if isinstance(value, str | int | float | bool)
    ]
    shown.sort(key=lambda item: len(str(item[1])) > LONG_VALUE)  # long texts (a query) last
    details = " ".join(f"{key}={value}" for key, value in shown)
    return f"{_MARKS[status]} {data.get('phase', '?'):<22}{took}  [dim]{details[:100]}[/dim]"


def _sources(answer: dict[str, Any]) -> list[str]:
    citations = answer.get("citations") or {}
    lines = []
    for number in sorted(citations, key=int):
        cite = citations[number]
        title = cite.get("title") or cite.get("source") or "(untitled)"
        kind = " (memory)" if cite.get("kind") == "memory" else ""
        lines.append(
            f"[{number}] {title}{kind} — {cite.get('document_id')} ({cite.get('score', 0):.3f})"
        )
    return lines


async def ask_question(
    client: RagbusClient,
    question: str,
    console: Console,
    *,
    intent: str | None = None,
    top_k: int | None = None,
    namespaces: Sequence[str] | None = None,
    session_id: str | None = None,
    mode: str | None = None,
    found: Found | None = None,
    narrowed: dict[str, Any] | None = None,
) -> str | None:
    """Ask (one request that submits and streams), print phases and answer tokens live, then
    the sources; returns the final status. In a session, a follow-up's standalone question is
    shown when it differs from the asked. `found` collects what the search channels found."""
    streaming = streamed = False
    answer: dict[str, Any] | None = None
    status: str | None = None
    async for message in client.ask(
        question,
        intent=intent,
        top_k=top_k,
        namespaces=namespaces,
        session_id=session_id,
        mode=mode if mode != "answer" else None,
        filter=narrowed,
    ):
        data = message.data.get("data") or {}
        if message.event == "submitted":
            console.print(f"[dim]request {message.data.get('request_id')}[/dim]")
            continue
        if message.event != "token" and streaming:
            console.print()
            streaming = False
        if message.event == "phase":
            if found is not None:
                found.record(data)
            standalone = (data.get("metadata") or {}).get("standalone_query")
            if data.get("phase") == "query_rewrite" and standalone and standalone != question:
                console.print(f"[bold]understood as[/bold] {standalone}", highlight=False)
            if (line := _phase_line(data)) is not None:
                console.print(line, highlight=False)
        elif message.event == "token":
            if not streaming:
                console.print("[bold]answer[/bold] ", end="")
                streaming = streamed = True
            console.print(data.get("text", ""), end="", markup=False, highlight=False)
        elif message.event == "answer":
            answer = data
        elif message.event == "error":
            console.print(f"[red]error {data.get('code')}[/red]: {data.get('message')}")
        elif message.event == "done":
            status = data.get("status")
    if streaming:
        console.print()
    if answer is not None:
        if found is not None:
            found.cited = len(answer.get("citations") or {})
        if not streamed:
            console.print(f"[bold]answer[/bold] {answer.get('content', '')}", highlight=False)
        if note := (answer.get("metadata") or {}).get("note"):
            console.print(f"[yellow]{note}[/yellow]", highlight=False)
        if sources := _sources(answer):
            console.print("[bold]sources[/bold]")
            for line in sources:
                console.print(f"  {line}", markup=False, highlight=False)
    colour = "green" if status == "completed" else "red"
    console.print(f"[{colour}]{status or 'no terminal event'}[/{colour}]")
    return status
