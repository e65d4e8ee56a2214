"""Answers composed from tool outcomes: the result when a tool worked, a plain
statement of the failure when it did not — never a number nobody computed."""

from __future__ import annotations

from collections.abc import Sequence

from contracts.models import ToolOutcome


def _describe(outcome: ToolOutcome) -> str:
    if outcome.ok:
        output = outcome.output.strip() or "(no output)"
        return f"{output} ({outcome.name})."
    reason = (outcome.error or "no reason given").strip().rstrip(".")
    if outcome.name == "planner":
        return f"I could not run a tool for this question: {reason}."
    return f"The {outcome.name} tool failed: {reason}."


def tool_answer(outcomes: Sequence[ToolOutcome]) -> str:
    if not outcomes:
        return "I could not run a tool for this question."
    return " ".join(_describe(outcome) for outcome in outcomes)
