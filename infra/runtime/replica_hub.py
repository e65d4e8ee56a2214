"""The store owner's side of its search replicas: who they are, whether each one's copy holds
every write, and which search commands go to them.

The process that owns the embedded stores keeps the search consumers: every search command
reaches it, as without replicas. It hands a command to a replica (a core NATS request on
`contracts.subjects.search_replica_subject`) only when that replica's copy holds every write
the stores have taken so far (its announced `StoresVersion` equals the owner's now), so a
question asked right after an ingest is answered from a copy that holds what was ingested;
and only while the replica runs no more commands than the owner runs itself, so the two
processes share the work. It answers the command itself when no replica is fresh, when the
replica finds its copy behind after all (`stale`), fails, or does not answer in time.

It also answers the replicas' `STORES_VERSION` requests, by which a replica learns that its
copy is behind and fetches a new one (`launcher.replicas`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from prometheus_client import Counter
from pydantic import ValidationError

from contracts import subjects as sj
from contracts.commands import SearchCommand
from contracts.enums import Channel
from contracts.replicas import ReplicaAnswer, ReplicaSeen, ReplicaTask, StoresVersion
from infra.logging import get_logger

log = get_logger(__name__)

HANDOFFS = Counter(
    "ragbus_search_handoffs_total",
    "Search commands the store owner handed to a search replica, by outcome: done, or why the "
    "owner answered it itself (stale, failed, timeout, unreachable)",
    ["outcome"],
)

SEEN_FOR_S = 6.0
"""A replica not heard from for this long is taken for gone (they announce every
`launcher.replicas.ANNOUNCE_EVERY_S`)."""
REPLICA_CONCURRENCY = 32
"""Commands one replica answers at once (the owner hands it no more than it answers itself)."""
HANDOFF_TIMEOUT_S = 20.0
"""How long the owner waits for a replica's answer before answering the command itself (the
JetStream message is kept alive meanwhile by the error policy's heartbeat)."""


@dataclass
class Replica:
    name: str
    version: StoresVersion | None
    seen_at: float
    running: int = 0
    """Commands handed to it and not answered yet."""


class ReplicaHub:
    """Search replicas as the store owner sees them (`hand_off`)."""

    def __init__(
        self,
        nc: NatsClient,
        version: Callable[[], StoresVersion],
        *,
        timeout_s: float = HANDOFF_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nc = nc
        self.version = version
        """The stores' version now (`Resources.stores_version`)."""
        self._timeout_s = timeout_s
        self._clock = clock
        self.replicas: dict[str, Replica] = {}
        self.running_here = 0
        """Search commands this process answers itself right now."""
        self._subscriptions: list[Subscription] = []

    async def start(self) -> None:
        self._subscriptions = [
            await self._nc.subscribe(sj.SEARCH_REPLICAS, cb=self._seen),
            await self._nc.subscribe(sj.STORES_VERSION, cb=self._tell_version),
        ]

    async def stop(self) -> None:
        for subscription in self._subscriptions:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
        self._subscriptions = []

    async def _seen(self, msg: Msg) -> None:
        try:
            seen = ReplicaSeen.model_validate_json(msg.data)
        except ValidationError as exc:
            log.warning("replica_announcement_malformed", errors=exc.error_count())
            return
        self.seen(seen)

    def seen(self, seen: ReplicaSeen) -> None:
        """A replica's announcement: its copy's version, from now on."""
        known = self.replicas.get(seen.replica)
        if known is None:
            self.replicas[seen.replica] = Replica(seen.replica, seen.version, self._clock())
            log.info("search_replica_seen", replica=seen.replica, note=seen.note or None)
            return
        known.version, known.seen_at = seen.version, self._clock()

    async def _tell_version(self, msg: Msg) -> None:
        if msg.reply:
            await msg.respond(self.version().model_dump_json().encode())

    def fresh(self, version: StoresVersion | None = None) -> list[Replica]:
        """The replicas heard from lately whose copy holds every write there is now
        (`version`: the stores' now, when the caller has it already)."""
        now, version = self._clock(), version or self.version()
        return [
            r
            for r in self.replicas.values()
            if r.version == version and now - r.seen_at < SEEN_FOR_S
        ]

    def pick(self, version: StoresVersion | None = None) -> Replica | None:
        """The fresh replica with the fewest commands in hand, when it has no more than this
        process answers itself (so each side takes its share); else None."""
        fresh = self.fresh(version)
        if not fresh:
            return None
        best = min(fresh, key=lambda r: r.running)
        return best if best.running <= self.running_here else None

    @contextlib.contextmanager
    def answering_here(self) -> Iterator[None]:
        """Counts a command this process answers itself, for `pick`."""
        self.running_here += 1
        try:
            yield
        finally:
            self.running_here -= 1

    async def hand_off(self, cmd: SearchCommand, channel: Channel, deliveries: int = 1) -> bool:
        """Whether a replica answered `cmd` (its result is published); False when this process
        is to answer it itself."""
        version = self.version()
        replica = self.pick(version)
        if replica is None:
            return False
        task = ReplicaTask(version=version, channel=channel, command=cmd, deliveries=deliveries)
        replica.running += 1
        try:
            reply = await self._nc.request(
                sj.search_replica_subject(replica.name),
                task.model_dump_json().encode(),
                timeout=self._timeout_s,
            )
            answer = ReplicaAnswer.model_validate_json(reply.data)
        except TimeoutError:
            return self._fell_back(replica, "timeout")
        except ValidationError:
            return self._fell_back(replica, "failed", "a malformed answer")
        except Exception as exc:  # no responders, a connection lost: answered here
            return self._fell_back(replica, "unreachable", f"{type(exc).__name__}: {exc}")
        finally:
            replica.running -= 1
        if answer.status != "done":
            return self._fell_back(replica, answer.status, answer.error)
        HANDOFFS.labels(outcome="done").inc()
        return True

    def _fell_back(self, replica: Replica, outcome: str, error: str | None = None) -> bool:
        HANDOFFS.labels(outcome=outcome).inc()
        log.warning("search_handoff_fell_back", replica=replica.name, outcome=outcome, error=error)
        if outcome in {"stale", "timeout", "unreachable"}:
            replica.version = None  # until it says again which copy it serves from
        return False


@dataclass
class ServedCopy:
    """A replica's side: the copy of the stores it serves from (its version, and a generation
    that each new copy raises) and the commands it is answering, by the generation each began
    under, so the copy a new one replaced is closed once the last of them ends."""

    version: StoresVersion | None = None
    generation: int = 0
    running: Tally[int] = field(default_factory=Tally)
    answered: int = 0
    """Commands answered (`done`) since the process began."""
    _ended: asyncio.Event = field(default_factory=asyncio.Event)

    def holds(self, wanted: StoresVersion) -> bool:
        """Whether the copy holds every write `wanted` names (the same owner, as many writes
        or more in each store)."""
        have = self.version
        return (
            have is not None
            and have.owner == wanted.owner
            and have.vectors >= wanted.vectors
            and have.graph >= wanted.graph
        )

    @property
    def busy(self) -> int:
        return sum(self.running.values())

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        generation = self.generation
        self.running[generation] += 1
        try:
            yield
        finally:
            self.running[generation] -= 1
            if not self.running[generation]:
                del self.running[generation]
            self._ended.set()

    async def drained(self, generation: int, timeout_s: float) -> bool:
        """Wait until no command begun under `generation` runs (at most `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while self.running.get(generation):
            self._ended.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ended.wait(), left)
        return True

    def serve(self, version: StoresVersion) -> int:
        """A new copy served from now on; the generation it replaces."""
        replaced = self.generation
        self.version, self.generation = version, self.generation + 1
        return replaced
