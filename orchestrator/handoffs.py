"""What a phase of the saga decides when the request goes on in another phase: a hand-off,
which the saga's top runs (`orchestrator.saga.Saga.follow`, the dispatch table). So a phase
never imports another phase, nor the saga: it returns either the `Transition` to commit or
the hand-off that says which phase takes the request next, with what it carries.

Every phase function returns a `Decision`; the top follows hand-offs until a `Transition`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from contracts.models import ToolCall
from contracts.results import CriticResult, Critique, Fused, SearchResult
from orchestrator.transition import Outgoing, Transition


@dataclass(frozen=True)
class StartSearch:
    """The attempt's search (`orchestrator.search.start`), sent after `messages`."""

    messages: list[Outgoing] = field(default_factory=list)


@dataclass(frozen=True)
class SearchClassified:
    """A search that classified the question answered, its classification taken: its
    channels are answered for as by any search (`orchestrator.search.on_classified`)."""

    result: SearchResult


@dataclass(frozen=True)
class StartFuse:
    """The fuse step (`orchestrator.fuse.start`), sent after `messages`."""

    messages: list[Outgoing] = field(default_factory=list)


@dataclass(frozen=True)
class TakeFused:
    """A fused list, from a search worker that fused its channels
    (`orchestrator.fuse.on_fused`)."""

    fused: Fused


@dataclass(frozen=True)
class StartTool:
    """A tool round (`orchestrator.generate.start_tool`), sent after `messages`."""

    calls: list[ToolCall] = field(default_factory=list)
    messages: list[Outgoing] = field(default_factory=list)


@dataclass(frozen=True)
class StartGenerate:
    """Generation (`orchestrator.generate.start`)."""


@dataclass(frozen=True)
class StartPlan:
    """A research request's plan (`orchestrator.research.start_plan`)."""


@dataclass(frozen=True)
class StartCritic:
    """The critic step, for an answer nobody judged yet (`orchestrator.critique.start_critic`)."""


@dataclass(frozen=True)
class TakeCritique:
    """The attempt's verdict (`orchestrator.critique.on_critique`)."""

    critique: CriticResult | Critique


Handoff: TypeAlias = (
    StartSearch
    | SearchClassified
    | StartFuse
    | TakeFused
    | StartTool
    | StartGenerate
    | StartPlan
    | StartCritic
    | TakeCritique
)
Decision: TypeAlias = Transition | Handoff
"""What a phase decides: the transition to commit, or the phase that takes the request next."""
