"""The classification chain: caller override → strong rule → SetFit → zero-shot → rules.

Each link answers only when the one before it cannot: no trained model (or one trained on
another body) means zero-shot, no usable encoder means rules. Classification degrades; it
never blocks a request. `method` says which link answered.

The query is encoded once: SetFit's head reads the same MiniLM embedding the dense search
reuses, and that embedding is returned as `query_vector`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np

from contracts.enums import Channel, Intent
from engines.classify.intent_model import IntentModel, ModelSlot
from engines.classify.query_form import is_keyword_query, keyword_intents, quantity_intents
from engines.classify.rules import STRONG, RuleMatch, has_calculation_cue, match_rules
from engines.classify.zero_shot import ZeroShotClassifier
from infra.logging import get_logger
from infra.retrieval.intent_profiles import weights_for
from infra.retrieval.vectors.codec import pack_query

if TYPE_CHECKING:
    from infra.retrieval.encoder import Encoder

log = get_logger(__name__)

Method = Literal["setfit", "zero_shot", "rules", "override"]

AGREEMENT_BOOST: Final = 0.5
"""When a rule agrees with zero-shot, close this share of the gap to certainty."""


@dataclass(frozen=True)
class Classification:
    intent: Intent
    confidence: float
    method: Method
    weights: dict[Channel, float]
    query_vector: str | None
    """The query's embedding, packed for the wire (`infra.retrieval.vectors.codec`)."""


def described(found: Classification) -> dict[str, Any]:
    """A classification as its phase event's metadata shows it."""
    return {
        "intent": found.intent.value,
        "confidence": found.confidence,
        "method": found.method,
        "weights": {c.value: w for c, w in found.weights.items()},
    }


@dataclass(frozen=True)
class _Embedded:
    vector: np.ndarray
    encoder: Encoder
    zero_shot: ZeroShotClassifier


class IntentClassifier:
    def __init__(
        self, encoder: Callable[[], Awaitable[Encoder]], model_dir: Path | None = None
    ) -> None:
        self._get_encoder = encoder
        self._zero_shot: ZeroShotClassifier | None = None
        self._models = ModelSlot(model_dir)
        self._mismatch_logged = False

    async def classify(
        self, query: str, override: Intent | None = None, *, routed: bool = False
    ) -> Classification:
        """`routed`: the query matches an operator's tool route (`infra.tool_routes`) that
        its tenant may use, an unmistakable tool need, as arithmetic is."""
        rule = RuleMatch(Intent.TOOL, STRONG, "tool route") if routed else match_rules(query)
        embedded = await self._embed(query)

        intent: Intent
        confidence: float
        method: Method
        if override is not None:
            intent, confidence, method = override, 1.0, "override"
        elif rule.confidence >= STRONG or embedded is None:
            intent, confidence, method = rule.intent, rule.confidence, "rules"
        else:
            found = await self._setfit(query, embedded)
            if found is not None:
                intent, confidence, method = *found, "setfit"
            else:
                intent, confidence, method = await self._zero_shot_and_rules(
                    rule, embedded, allowed_intents(query)
                )

        vector = embedded.vector if embedded else None
        return Classification(
            intent=intent,
            confidence=round(confidence, 4),
            method=method,
            weights=weights_for(intent, confidence),
            query_vector=pack_query(vector) if vector is not None else None,
        )

    async def model(self) -> IntentModel | None:
        """The trained model, loaded off the event loop on first use."""
        if self._models.loaded:
            return self._models.get()
        return await asyncio.to_thread(self._models.get)

    async def _embed(self, query: str) -> _Embedded | None:
        """The query vector, or None when the encoder is unusable."""
        try:
            encoder = await self._get_encoder()
            if self._zero_shot is None or self._zero_shot.encoder is not encoder:
                self._zero_shot = ZeroShotClassifier(encoder)
            vector = np.asarray(await encoder.aencode([query]), dtype=np.float32)[0]
        except Exception as exc:
            log.warning("encoder_unavailable", error=f"{type(exc).__name__}: {exc}")
            return None
        return _Embedded(vector, encoder, self._zero_shot)

    async def _setfit(self, query: str, embedded: _Embedded) -> tuple[Intent, float] | None:
        model = await self.model()
        if model is None or not self._fits(model, embedded.encoder):
            return None
        try:
            if model.shares_body:  # a TF-IDF row and a 7-column product: no thread hop
                probabilities = model.probabilities(query, embedded.vector)
            else:
                probabilities = await asyncio.to_thread(model.probabilities, query, embedded.vector)
        except Exception as exc:
            log.warning("setfit_failed", error=f"{type(exc).__name__}: {exc}")
            return None
        return _best(probabilities, allowed_intents(query))

    def _fits(self, model: IntentModel, encoder: Encoder) -> bool:
        """A shared-body head only understands the embeddings of the body it was fitted on."""
        meta = model.meta
        if not model.shares_body or (meta.body, meta.body_dim) == (encoder.name, encoder.dim):
            return True
        if not self._mismatch_logged:
            self._mismatch_logged = True
            log.warning(
                "intent_model_body_mismatch",
                model_body=meta.body,
                model_dim=meta.body_dim,
                encoder=encoder.name,
                encoder_dim=encoder.dim,
                fallback="zero_shot",
                hint="retrain with `ragbus train-intent`",
            )
        return False

    @staticmethod
    async def _zero_shot_and_rules(
        rule: RuleMatch, embedded: _Embedded, allowed: frozenset[Intent]
    ) -> tuple[Intent, float, Method]:
        """Zero-shot decides among the allowed intents; a rule that agrees raises its
        confidence, a surer rule overrides."""
        # Only a query with a calculation cue may be routed to the tools (see rules).
        exclude = frozenset() if rule.intent is Intent.TOOL else frozenset({Intent.TOOL})
        result = await embedded.zero_shot.classify(embedded.vector, exclude, allowed)
        if rule.rule is not None and rule.intent == result.intent:
            boosted = result.confidence + (1.0 - result.confidence) * AGREEMENT_BOOST
            return result.intent, max(boosted, rule.confidence), "zero_shot"
        if rule.rule is not None and rule.confidence > result.confidence:
            return rule.intent, rule.confidence, "rules"
        return result.intent, result.confidence, "zero_shot"


def allowed_intents(query: str) -> frozenset[Intent]:
    """The intents a model may route `query` to: `tool` only with a calculation cue
    (`rules.has_calculation_cue`), and a keyword query only to `factual` or an intent that
    one of its words names, and not to `factual` when it names a site; a question that asks for
    a quantity only to `factual`, a comparison or the calculator (`query_form`)."""
    allowed = frozenset(Intent)
    if is_keyword_query(query):
        allowed = keyword_intents(query) | {Intent.TOOL}
    elif (quantity := quantity_intents(query)) is not None:
        allowed = quantity
    if not has_calculation_cue(query):
        allowed -= {Intent.TOOL}
    return allowed


def _best(
    probabilities: Mapping[Intent, float], allowed: frozenset[Intent]
) -> tuple[Intent, float]:
    """The most probable allowed intent (`factual` when the model knows none of them), with its
    probability among the allowed ones: the guards rule the others out, so what the model gave
    them is shared out by renormalising (a keyword query the guard sends to `factual` alone is
    `factual` for certain, not at the 0.3 the model had left for it)."""
    mass = sum(p for intent, p in probabilities.items() if intent in allowed)
    ranked = sorted(probabilities.items(), key=lambda item: item[1], reverse=True)
    for intent, probability in ranked:
        if intent in allowed:
            return intent, probability / mass if mass > 0 else probability
    return Intent.FACTUAL, probabilities.get(Intent.FACTUAL, 0.0)
