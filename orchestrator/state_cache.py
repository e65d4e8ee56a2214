"""The last committed state of the requests this orchestrator process is driving.

A request's transitions come one after another, and with one orchestrator process (or a
request's results landing where its last transition ran) the state a transition would read
from Redis is the one this process just wrote. Keeping it spares each transition a round trip
(state, version, seen) and the parse of the whole state. It is only ever a guess: the commit
still checks the version (another replica got there first: read and decide again) and the
inbound event id (applied already: a duplicate), so a stale entry costs a retry, never a
wrong state.

An entry is taken out while a transition uses it (the saga decides by changing the state it
is given) and put back only after a commit that wrote it; a finished request leaves.

An entry also carries the outbox entries its request has published since (`sent`): the next
commit deletes them in its own script, which spares each transition the round trip of a
separate delete. An entry that leaves (taken, evicted) before they were noted is no place to
note them, so `note_sent` says whether it kept them, and the caller deletes them itself when
it did not.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from orchestrator.state import RequestState


@dataclass(frozen=True)
class Committed:
    state: RequestState
    version: int
    sent: tuple[str, ...] = ()
    """Outbox entries (event ids) published since the commit: the next commit deletes them."""


class StateCache:
    """A bounded LRU of `Committed` by request id (`size` 0: keeps nothing)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[str, Committed] = OrderedDict()

    def take(self, request_id: str) -> Committed | None:
        return self._entries.pop(request_id, None)

    def put(self, request_id: str, state: RequestState, version: int) -> None:
        if self.size <= 0 or state.status.is_terminal:
            self._entries.pop(request_id, None)
            return
        self._entries[request_id] = Committed(state, version)
        self._entries.move_to_end(request_id)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def note_sent(self, request_id: str, event_ids: list[str]) -> bool:
        """Keep published outbox entries for the request's next commit to delete; False when
        the request has no entry here to keep them with."""
        entry = self._entries.get(request_id)
        if entry is None:
            return False
        self._entries[request_id] = Committed(
            entry.state, entry.version, entry.sent + tuple(event_ids)
        )
        return True

    def forget_sent(self, request_id: str) -> tuple[str, ...]:
        """The published entries kept for the request's next commit, handed back to be deleted
        now (the entry itself stays)."""
        entry = self._entries.get(request_id)
        if entry is None or not entry.sent:
            return ()
        self._entries[request_id] = Committed(entry.state, entry.version)
        return entry.sent

    def __len__(self) -> int:
        return len(self._entries)
