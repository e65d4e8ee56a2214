"""Zero-shot intent classification by embedding similarity to prototype questions.

Each intent is described by a handful of typical questions, encoded once. A query's
score for an intent is the mean cosine of its two closest prototypes (one lucky match
is not enough); a softmax with a low temperature turns the scores into a confidence.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from contracts.enums import Intent

if TYPE_CHECKING:
    from infra.retrieval.encoder import Encoder

TEMPERATURE: Final = 0.05
"""Cosine gaps between intents are small (~0.05-0.2); a low temperature makes them count."""

PROTOTYPES: Final[dict[Intent, tuple[str, ...]]] = {
    Intent.FACTUAL: (
        "What is the definition of this term?",
        "Who founded the company and when?",
        "When was the system first released?",
        "What does this component do?",
        "Which year did the event happen?",
        "What is the capital city of that country?",
        "Explain how this mechanism works.",
    ),
    Intent.PROCEDURAL: (
        "How do I install and configure the software?",
        "What are the steps to set this up?",
        "How can I fix this error?",
        "Walk me through the process of deploying it.",
        "How to reset my password?",
    ),
    Intent.COMPARISON: (
        "What is the difference between these two options?",
        "Compare the first approach with the second one.",
        "Which is faster, A or B?",
        "How does this product differ from its competitor?",
        "What are the pros and cons of each?",
    ),
    Intent.RECOMMENDATION: (
        "Which option would you recommend for my use case?",
        "What is the best tool for this job?",
        "Should I use this library or write my own?",
        "Suggest a good approach for a small team.",
        "What would you advise me to choose?",
    ),
    Intent.NAVIGATION: (
        "Where can I find the document about pricing?",
        "Show me the section on security.",
        "Which page describes the API?",
        "Find the chapter about installation.",
        "Open the report on last quarter.",
    ),
    Intent.SUMMARY: (
        "Summarize the main themes of the documents.",
        "Give me an overview of the whole collection.",
        "What are the key topics discussed across all texts?",
        "What is this corpus about in general?",
        "Provide a high-level summary of everything.",
    ),
    Intent.TOOL: (
        "Calculate 17 times 23 plus 4.",
        "What is 15 percent of 200?",
        "Compute the square root of 144.",
        "What is 2 to the power of 10?",
        "Convert this number and do the arithmetic.",
    ),
}


@dataclass(frozen=True)
class ZeroShotResult:
    intent: Intent
    confidence: float
    scores: dict[Intent, float]
    """The mean top-2 cosine per intent, before the softmax."""


def _softmax(values: np.ndarray, temperature: float) -> np.ndarray:
    scaled = (values - values.max()) / temperature
    exp = np.exp(scaled)
    return exp / exp.sum()


class ZeroShotClassifier:
    """Holds the encoded prototypes; encodes them on first use, once per process."""

    def __init__(self, encoder: Encoder, temperature: float = TEMPERATURE) -> None:
        self.encoder = encoder
        self.temperature = temperature
        self._intents = list(PROTOTYPES)
        self._prototypes: list[np.ndarray] | None = None
        self._lock = asyncio.Lock()

    async def _prototype_vectors(self) -> list[np.ndarray]:
        async with self._lock:
            if self._prototypes is None:
                texts = [text for intent in self._intents for text in PROTOTYPES[intent]]
                matrix = np.asarray(await self.encoder.aencode(texts), dtype=np.float32)
                groups, start = [], 0
                for intent in self._intents:
                    end = start + len(PROTOTYPES[intent])
                    groups.append(matrix[start:end])
                    start = end
                self._prototypes = groups
            return self._prototypes

    async def classify(
        self,
        query_vector: np.ndarray,
        exclude: frozenset[Intent] = frozenset(),
        choose_from: frozenset[Intent] | None = None,
    ) -> ZeroShotResult:
        """The closest intent among those not excluded, with its softmax probability.
        `choose_from` narrows the choice but not the softmax: an intent chosen because the
        closer ones were not allowed keeps its own, lower, probability."""
        prototypes = await self._prototype_vectors()
        intents = [i for i in self._intents if i not in exclude]
        scores = np.array(
            [
                float(np.sort(group @ query_vector)[-2:].mean())
                for intent, group in zip(self._intents, prototypes, strict=True)
                if intent not in exclude
            ]
        )
        probabilities = _softmax(scores, self.temperature)
        eligible = [
            n for n, intent in enumerate(intents) if choose_from is None or intent in choose_from
        ]
        best = max(eligible or range(len(intents)), key=lambda n: probabilities[n])
        return ZeroShotResult(
            intent=intents[best],
            confidence=float(probabilities[best]),
            scores={i: float(s) for i, s in zip(intents, scores, strict=True)},
        )
