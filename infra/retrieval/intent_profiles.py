"""Channel weights per intent, shared by the classifier (which picks them) and the saga
(which falls back to the prior when classification fails).

Started from the seeds' C-LARA table and tuned on development data (NFCorpus dev split and
MuSiQue train-100, never a test split), where the seeds' table fused *below* the best
single channel: its graph-heavy weights (graph local 0.4 for factual, an even split when
unsure) let the two graph channels — the weakest alone — outvote dense and sparse. The
tuned table keeps each intent's lean (summary toward graph global, navigation toward
exact terms, procedural toward meaning) on top of a prior that trusts the strong channels.

| intent         | vector | sparse | graph local | graph global | memory |
|----------------|--------|--------|-------------|--------------|--------|
| factual        | 0.55   | 0.35   | 0.10        | 0.00         | 0.20   |
| procedural     | 0.60   | 0.25   | 0.05        | 0.10         | 0.10   |
| comparison     | 0.55   | 0.30   | 0.10        | 0.05         | 0.15   |
| recommendation | 0.55   | 0.25   | 0.05        | 0.15         | 0.30   |
| navigation     | 0.40   | 0.50   | 0.10        | 0.00         | 0.05   |
| summary        | 0.45   | 0.15   | 0.05        | 0.35         | 0.10   |
| tool           | 0.50   | 0.35   | 0.15        | 0.00         | 0.10   |
| prior (unsure) | 0.55   | 0.35   | 0.10        | 0.00         | 0.20   |

Memory (what the conversation's scope remembers: earlier answers, facts the user stated) is
searched only for a request with a scope, so the document channels' balance above is what
a request without one fuses. Its weights are not tuned on any data set (no public set has
conversations with memories): they lean toward memory where a user's own situation matters
most (recommendations) and away where the documents must speak (navigation, summaries).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from contracts.enums import Channel, Intent

LOW_CONFIDENCE: Final = 0.45
"""Below this, the classification is a guess: use the prior."""


def _profile(
    vector: float, sparse: float, local: float, global_: float, memory: float
) -> dict[Channel, float]:
    return {
        Channel.VECTOR: vector,
        Channel.SPARSE: sparse,
        Channel.GRAPH_LOCAL: local,
        Channel.GRAPH_GLOBAL: global_,
        Channel.MEMORY: memory,
    }


PROFILES: Final = MappingProxyType(
    {
        # specific facts: meaning and exact terms, entities as support
        Intent.FACTUAL: _profile(0.55, 0.35, 0.10, 0.0, 0.20),
        # how-to: meaning first, some surrounding context
        Intent.PROCEDURAL: _profile(0.60, 0.25, 0.05, 0.10, 0.10),
        # comparing options: dense and lexical in balance, a little of everything
        Intent.COMPARISON: _profile(0.55, 0.30, 0.10, 0.05, 0.15),
        # suggestions: a lean to the global view
        Intent.RECOMMENDATION: _profile(0.55, 0.25, 0.05, 0.15, 0.30),
        # finding a document or section: exact terms lead
        Intent.NAVIGATION: _profile(0.40, 0.50, 0.10, 0.0, 0.05),
        # global questions: community summaries weigh most after meaning
        Intent.SUMMARY: _profile(0.45, 0.15, 0.05, 0.35, 0.10),
        # a calculation: retrieval only gives context
        Intent.TOOL: _profile(0.50, 0.35, 0.15, 0.0, 0.10),
    }
)

PRIOR: Final = MappingProxyType(_profile(0.55, 0.35, 0.10, 0.0, 0.20))
"""When the intent is unknown: what works best on average, not an even split."""

EVEN: Final = MappingProxyType({channel: 1.0 / len(Channel) for channel in Channel})
"""Every channel alike: the critic's `rebalance` retry, to see what the lean was hiding."""


def weights_for(intent: Intent, confidence: float) -> dict[Channel, float]:
    """The intent's profile, or the prior when the intent is too unsure to trust."""
    profile = PROFILES[intent] if confidence >= LOW_CONFIDENCE else PRIOR
    return dict(profile)
