"""Channel weights per intent (C-LARA's table, plus summary and tool).

A confident intent picks its profile; an unsure one falls back to `BALANCED`, because a
low-confidence result should spread its bets rather than commit to a wrong extreme.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from contracts.enums import Channel, Intent

LOW_CONFIDENCE: Final = 0.45
"""Below this, the classification is a guess: use the balanced profile."""


def _profile(vector: float, sparse: float, local: float, global_: float) -> dict[Channel, float]:
    return {
        Channel.VECTOR: vector,
        Channel.SPARSE: sparse,
        Channel.GRAPH_LOCAL: local,
        Channel.GRAPH_GLOBAL: global_,
    }


PROFILES: Final = MappingProxyType(
    {
        # specific facts: entity lookup in the local graph
        Intent.FACTUAL: _profile(0.3, 0.3, 0.4, 0.0),
        # how-to: semantic match plus surrounding context
        Intent.PROCEDURAL: _profile(0.4, 0.1, 0.2, 0.3),
        # comparing options: dense and lexical in balance
        Intent.COMPARISON: _profile(0.35, 0.25, 0.2, 0.2),
        # suggestions: balanced with a lean to the global view
        Intent.RECOMMENDATION: _profile(0.3, 0.2, 0.2, 0.3),
        # finding a document or section: exact terms and entities
        Intent.NAVIGATION: _profile(0.2, 0.5, 0.3, 0.0),
        # global questions: community summaries
        Intent.SUMMARY: _profile(0.1, 0.0, 0.1, 0.8),
        # a calculation: retrieval only gives context, no channel is preferred
        Intent.TOOL: _profile(0.25, 0.25, 0.25, 0.25),
    }
)

BALANCED: Final = MappingProxyType(_profile(0.25, 0.25, 0.25, 0.25))


def weights_for(intent: Intent, confidence: float) -> dict[Channel, float]:
    """The intent's profile, or the balanced one when the intent is too unsure to trust."""
    profile = PROFILES[intent] if confidence >= LOW_CONFIDENCE else BALANCED
    return dict(profile)
