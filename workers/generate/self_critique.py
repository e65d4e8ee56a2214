"""Generation critiques its own final answer when the saga asks it to.

The critic reads what generation just had in hand: the question, the answer, its citations,
the whole passages and the query's embedding. With `GenerateCommand.critique_attempts_left`
set (`RAGBUS_CRITIQUE_WITH_GENERATION`, on by default) the generating worker runs the critic's
own judgement (the critic engine, `engines.critic.judge`: the same scoring, the phase `critic`
with the same metadata) and reports the verdict with the answer. That spares a request the hop
through the saga: a result, a transition and a command carrying the passages again.

It is bounded by `RAGBUS_CRITIC_TIMEOUT_S`. A critique that fails or runs out of time leaves
the answer without a verdict, and the saga sends the critic its own command, as without the
setting. An answer that asks for tools is not critiqued: the saga runs the tools first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from contracts.commands import CriticCommand, GenerateCommand
from contracts.enums import Phase
from contracts.models import ToolCall
from contracts.results import Critique
from engines.critic.judge import as_critique, judge
from engines.generate.extractive import Answer
from infra.errors import describe_error
from infra.logging import get_logger
from infra.runtime.bus import Bus
from infra.runtime.phase_events import phase
from infra.runtime.resources import Resources
from infra.runtime.step_context import RequestNotLive

log = get_logger(__name__)


def wants_critique(cmd: GenerateCommand, tool_calls: list[ToolCall]) -> bool:
    """Asked for, and the answer is final: no tool call the saga would still run."""
    return cmd.critique_attempts_left is not None and not (tool_calls and cmd.tool_rounds_left)


def critic_command(cmd: GenerateCommand, answer: Answer) -> CriticCommand:
    """The command the critic step would have had, from a whole generate command (its
    passages and vectors resolved already): nothing in it needs validating again."""
    fields: dict[str, Any] = {
        **cmd.correlation(),
        "query": cmd.query,
        "intent": cmd.intent,
        "answer": answer.text,
        "citations": dict(answer.citations),
        "contexts": cmd.contexts,
        "tool_results": cmd.tool_results,
        "attempts_left": cmd.critique_attempts_left or 0,
        "query_vector": cmd.query_vectors.get(cmd.query),
    }
    return CriticCommand.model_construct(**fields)


async def judged(bus: Bus, cmd: CriticCommand, resources: Resources) -> Critique:
    """The critic engine's judgement, measured and reported as the phase `critic`, as the
    critic worker reports its own."""
    async with phase(bus, cmd, Phase.CRITIC) as run:
        verdict, scores = await judge(cmd, resources, run.metadata)
    return as_critique(verdict, scores)


async def self_critique(
    bus: Bus, cmd: GenerateCommand, answer: Answer, resources: Resources
) -> Critique | None:
    """The critic's verdict on `answer`, or None when it cannot be had in time (the critic
    step then judges it)."""
    try:
        found = await asyncio.wait_for(
            judged(bus, critic_command(cmd, answer), resources),
            resources.settings.critic_timeout_s,
        )
    except RequestNotLive:
        raise
    except Exception as exc:  # TimeoutError included: the critic step is the fallback
        log.warning("self_critique_failed", error=describe_error(exc))
        return None
    return found
