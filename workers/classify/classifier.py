"""The classification chain: caller override → strong rule → zero-shot (+ rules) → rules.

The query embedding computed here is returned with the intent, so dense search reuses it
and each request encodes its query once. If the encoder cannot be loaded or fails, the
rules still answer: classification degrades, it never blocks a request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from contracts.enums import Channel, Intent
from infra.intent_profiles import weights_for
from infra.logging import get_logger
from workers.classify.rules import STRONG, RuleMatch, match_rules
from workers.classify.zero_shot import ZeroShotClassifier

if TYPE_CHECKING:
    from infra.encoder import Encoder

log = get_logger(__name__)

AGREEMENT_BOOST: Final = 0.5
"""When a rule agrees with zero-shot, close this share of the gap to certainty."""


@dataclass(frozen=True)
class Classification:
    intent: Intent
    confidence: float
    method: str
    """override | rules | zero_shot | zero_shot+rules"""
    weights: dict[Channel, float]
    query_vector: list[float] | None


class IntentClassifier:
    def __init__(self, encoder: Callable[[], Awaitable[Encoder]]) -> None:
        self._get_encoder = encoder
        self._zero_shot: ZeroShotClassifier | None = None

    async def _embed(self, query: str) -> tuple[np.ndarray, ZeroShotClassifier] | None:
        """The query vector and the zero-shot model, or None when the encoder is unusable."""
        try:
            encoder = await self._get_encoder()
            if self._zero_shot is None or self._zero_shot.encoder is not encoder:
                self._zero_shot = ZeroShotClassifier(encoder)
            vector = np.asarray(await encoder.aencode([query]), dtype=np.float32)[0]
        except Exception as exc:
            log.warning("encoder_unavailable", error=f"{type(exc).__name__}: {exc}")
            return None
        return vector, self._zero_shot

    async def classify(self, query: str, override: Intent | None = None) -> Classification:
        rule = match_rules(query)
        embedded = await self._embed(query)
        vector = embedded[0] if embedded else None

        if override is not None:
            intent, confidence, method = override, 1.0, "override"
        elif rule.confidence >= STRONG or embedded is None:
            intent, confidence, method = rule.intent, rule.confidence, "rules"
        else:
            intent, confidence, method = await self._combine(rule, *embedded)

        return Classification(
            intent=intent,
            confidence=round(confidence, 4),
            method=method,
            weights=weights_for(intent, confidence),
            query_vector=vector.astype(float).tolist() if vector is not None else None,
        )

    @staticmethod
    async def _combine(
        rule: RuleMatch, vector: np.ndarray, zero_shot: ZeroShotClassifier
    ) -> tuple[Intent, float, str]:
        """Zero-shot decides; a rule that agrees raises its confidence, a surer rule overrides."""
        # "What is the capital of France?" sounds like "What is 15% of 200?" to an encoder:
        # only a query with a calculation cue may be routed to the tools.
        exclude = frozenset() if rule.intent is Intent.TOOL else frozenset({Intent.TOOL})
        result = await zero_shot.classify(vector, exclude)
        if rule.rule is not None and rule.intent == result.intent:
            boosted = result.confidence + (1.0 - result.confidence) * AGREEMENT_BOOST
            return result.intent, max(boosted, rule.confidence), "zero_shot+rules"
        if rule.rule is not None and rule.confidence > result.confidence:
            return rule.intent, rule.confidence, "rules"
        return result.intent, result.confidence, "zero_shot"
