"""What a saga decision comes to (`Transition`): the request's new state and the messages to
send once it is committed (`Outgoing`), each kept in the request's outbox until it is published
(`OutboxEntry`). Pure data, below the decisions (`orchestrator.saga`) and the store that commits
them (`orchestrator.store`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from contracts.envelope import Envelope
from contracts.events import DoneEvent, PhaseEvent
from infra.runtime.bus import wire_json
from orchestrator.state import RequestState

PROGRESS = "progress"
DONE = "done"


@dataclass(frozen=True)
class OutboxEntry:
    """A message waiting to be published: its body is the JSON it will be published as,
    serialised once. Kept in Redis as its place, `subject`, `stream` and body on four lines
    (neither a subject nor a stream name holds a line break, and the body's JSON is one line).

    The place (`#<version>.<index>`: the commit that queued it, then its rank in that commit)
    is what keeps a request's messages in order when a redelivery publishes them: a Redis hash
    keeps its fields in insertion order only while it is small, and an `answer` is not, so
    `HGETALL` once gave a `done` before its `answer`.

    `kind` tells the two caller events whose order matters most: a `progress` event (a phase
    event) is news only while its request runs, and must not land after the request's `done`
    (`orchestrator.service` drops it instead). The place is marked `#<version>.<index>.<kind>`
    for either."""

    event_id: str
    subject: str
    stream: str
    body: str
    place: tuple[int, int] = (0, 0)
    kind: str = ""
    """"progress", "done" or "" (anything else)."""

    @property
    def progress(self) -> bool:
        return self.kind == PROGRESS

    def to_json(self) -> str:
        version, index = self.place
        mark = f".{self.kind}" if self.kind else ""
        return f"#{version}.{index}{mark}\n{self.subject}\n{self.stream}\n{self.body}"

    @classmethod
    def from_json(cls, event_id: str, text: str) -> OutboxEntry:
        if text.startswith("{"):  # kept by a version that stored the entry as one JSON object
            data = json.loads(text)
            return cls(event_id, data["subject"], data["stream"], json.dumps(data["body"]))
        place, kind = (0, 0), ""
        if text.startswith("#"):
            mark, text = text.split("\n", 1)
            version, index, *kinds = mark[1:].split(".", 2)
            place, kind = (int(version), int(index)), "".join(kinds)
        subject, stream, body = text.split("\n", 2)
        return cls(event_id, subject, stream, body, place, kind)


@dataclass(frozen=True)
class Outgoing:
    """A message a transition wants published once it has committed."""

    subject: str
    stream: str
    message: Envelope

    def entry(self) -> OutboxEntry:
        body = wire_json(self.message, self.stream)
        kind = PROGRESS if isinstance(self.message, PhaseEvent) else ""
        kind = DONE if isinstance(self.message, DoneEvent) else kind
        return OutboxEntry(self.message.event_id, self.subject, self.stream, body, (0, 0), kind)


@dataclass
class Transition:
    """What a saga step decided: the new state (None: nothing to change) and what to send."""

    state: RequestState | None
    messages: list[Outgoing] = field(default_factory=list)
