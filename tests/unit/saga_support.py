"""What the saga's unit tests share: `Run`, which drives one request through the saga
without a broker or Redis, the factual weights and passage its steps answer with, and `kinds`."""

from __future__ import annotations

from typing import Any

from contracts.commands import (
    ClassifyCommand,
    CriticCommand,
    FuseCommand,
    GenerateCommand,
    SearchCommand,
)
from contracts.enums import Channel, Intent
from contracts.events import DoneEvent
from contracts.models import RetrievedChunk
from contracts.queries import QuerySubmitted
from contracts.results import (
    ChannelOutcome,
    ClassifyResult,
    CriticResult,
    FuseResult,
    GenerateResult,
    SearchResult,
)
from infra.settings import Settings
from orchestrator.saga import Clock, Saga
from orchestrator.state import RequestState
from orchestrator.store import Transition, initial_state

FACTUAL = {
    Channel.VECTOR: 0.3,
    Channel.SPARSE: 0.3,
    Channel.GRAPH_LOCAL: 0.4,
    Channel.GRAPH_GLOBAL: 0.0,
}
CHUNK = RetrievedChunk(chunk_id="c1", document_id="d1", title="T", text="Pharos light.")


class Run:
    """Drives one request through the saga, keeping the state as Redis would."""

    def __init__(self, **settings: Any) -> None:
        # a command per channel unless a test asks for batches: the tests name channels; the
        # classify step of its own unless a test asks for it in the first search
        self.settings = Settings(
            **{"search_batch": False, "classify_with_search": False, **settings}
        )
        self.saga = Saga(self.settings)
        self.now = 1_000.0
        self.state: RequestState | None = None
        self.sent: list[Any] = []
        """What the saga sent, as callers receive it (a `done` and what it carries: two)."""
        self.published: list[Any] = []
        """What the saga sent, as messages."""

    def _take(self, transition: Transition) -> list[Any]:
        if transition.state is not None:
            self.state = transition.state.model_copy(deep=True)
        self.published.extend(m.message for m in transition.messages)
        messages = [
            event
            for m in transition.messages
            for event in (m.message.split() if isinstance(m.message, DoneEvent) else [m.message])
        ]
        self.sent.extend(messages)
        return messages

    def submit(self, **fields: Any) -> list[Any]:
        """What the API does, then what the orchestrator does with the submission."""
        fields.setdefault("query", "who built the lighthouse")
        msg = QuerySubmitted(request_id="r1", **fields)
        if self.state is None:
            self.state = initial_state(msg, self.settings, self.now)
        return self._take(self.saga.on_submitted(self.state, msg, Clock(self.now)))

    def result(self, result: Any) -> list[Any]:
        return self._take(self.saga.on_result(self.state, result, Clock(self.now)))

    def tick(self, advance: float) -> list[Any]:
        self.now += advance
        return self._take(self.saga.on_tick(self.state, Clock(self.now)))

    def last(self, kind: type) -> Any:
        return next(m for m in reversed(self.sent) if isinstance(m, kind))

    def corr(self, cmd: Any) -> dict[str, Any]:
        return {"request_id": cmd.request_id, "attempt": cmd.attempt, "command_id": cmd.event_id}

    # ---- steps answered the happy way
    def classify(
        self,
        weights: dict[Channel, float] = FACTUAL,
        intent: Intent = Intent.FACTUAL,
        confidence: float = 0.9,
    ) -> list[Any]:
        cmd = self.last(ClassifyCommand)
        return self.result(
            ClassifyResult(
                **self.corr(cmd),
                intent=intent,
                confidence=confidence,
                method="zero_shot",
                weights=weights,
            )
        )

    def search_all(self, chunks: list[RetrievedChunk] | None = None) -> list[Any]:
        out: list[Any] = []
        pending = self.state.pending if self.state else None
        awaited = set(pending.command_ids.values()) if pending else set()
        for cmd in [m for m in self.sent if isinstance(m, SearchCommand) and m.event_id in awaited]:
            found = chunks if chunks is not None else [CHUNK]
            out += self.result(
                SearchResult(
                    **self.corr(cmd),
                    channel=cmd.channel,
                    chunks=found,
                    also=[ChannelOutcome(channel=c, chunks=found) for c in cmd.also],
                )
            )
        return out

    def fuse(self) -> list[Any]:
        cmd = self.last(FuseCommand)
        return self.result(
            FuseResult(**self.corr(cmd), chunks=[CHUNK], effective_weights={Channel.VECTOR: 1.0})
        )

    def generate(self, **fields: Any) -> list[Any]:
        cmd = self.last(GenerateCommand)
        fields.setdefault("answer", "Sostratus built it [1].")
        fields.setdefault("citations", {1: "c1"})
        return self.result(GenerateResult(**self.corr(cmd), **fields))

    def to_critic(self) -> None:
        """Submit and answer every step the happy way, up to the critic's command."""
        self.submit()
        self.classify()
        self.search_all()
        self.fuse()
        self.generate()

    def critic(self, verdict: str = "accept", **fields: Any) -> list[Any]:
        cmd = self.last(CriticCommand)
        return self.result(
            CriticResult(
                **self.corr(cmd),
                verdict=verdict,
                confidence=fields.pop("confidence", 0.8),
                **fields,
            )
        )


def kinds(messages: list[Any]) -> list[str]:
    return [type(m).__name__ for m in messages]
