"""What a sync owes a source, decided from its listing and what KV says was seen: pure
decisions, no I/O (`plan`), and each path's document id (`document_id`).

- A path listed and never seen is put; one whose version changed is put too (its bytes are
  read then, and a path whose bytes did not change is only `touched`: nothing is sent).
- A path seen and no longer listed (nor passed over) is deleted, unless a path put by the same
  sync turns out to hold the same bytes: that is a move, and the document keeps its id
  (`infra.sources.sync` decides it once it has the new path's hash).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from contracts.sources import SourceRecord
from infra.runtime.ingest_producer import document_id_for
from infra.sources.kinds import ALWAYS_READ, Listed
from infra.sources.state import Pending, Seen


@dataclass
class Plan:
    puts: list[Listed] = field(default_factory=list)
    deletes: list[Seen] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    """Paths gone that made no document (they failed): their entries are dropped."""
    listed: int = 0

    @property
    def operations(self) -> int:
        return len(self.puts) + len(self.deletes)


def plan(listing: Iterable[Listed], seen: dict[str, Seen], kept: Iterable[str] = ()) -> Plan:
    """The operations that bring the index to `listing`; `kept`: paths passed over this time
    (unreadable, too large), whose documents stay as they are."""
    result = Plan()
    present = set(kept)
    for listed in listing:
        result.listed += 1
        present.add(listed.path)
        before = seen.get(listed.path)
        if before is not None and before.failed and before.version == listed.version:
            continue  # it failed as it is: tried again once it changes
        if (
            before is None
            or not before.sha256
            or before.version != listed.version
            or listed.version == ALWAYS_READ
        ):
            result.puts.append(listed)
    gone = [s for path, s in sorted(seen.items()) if path not in present]
    result.deletes = [s for s in gone if s.sha256]
    result.forgotten = [s.path for s in gone if not s.sha256 and s.pending is None]
    return result


def event_id(job_id: str, op: str, path: str) -> str:
    """The event id of one operation of one sync: the same when a killed sync is resumed, so
    the broker (its duplicate window) and the job's count (its seen set) drop a copy."""
    return hashlib.sha256(f"{job_id}\x00{op}\x00{path}".encode()).hexdigest()[:32]


def marked(plan: Plan, seen: dict[str, Seen], job_id: str) -> list[Seen]:
    """The entries a sync writes before it publishes anything: each operation as a pending
    mark on its path (a new path gets an entry that holds only the mark)."""
    entries = []
    for listed in plan.puts:
        before = seen.get(listed.path) or Seen(path=listed.path)
        mark = Pending(job_id=job_id, op="put", event_id=event_id(job_id, "put", listed.path))
        entries.append(before.model_copy(update={"pending": mark}))
    for gone in plan.deletes:
        mark = Pending(job_id=job_id, op="delete", event_id=event_id(job_id, "delete", gone.path))
        entries.append(gone.model_copy(update={"pending": mark}))
    return entries


def document_id(record: SourceRecord, path: str, taken: set[str]) -> str | None:
    """A new path's document id: the source's name, `:`, and the path as `ragbus ingest`
    makes it an id (folders joined by `__`), so two sources filling one namespace never share
    an id; `~2`, `~3`... where another path of the source holds it (a document moved here
    kept the id of its first path). None when the path makes no id."""
    base = document_id_for(path)
    if base is None:
        return None
    doc_id = f"{record.name}:{base}"
    if len(doc_id) > 250:
        return None
    candidate, n = doc_id, 1
    while candidate in taken:
        n += 1
        candidate = f"{doc_id}~{n}"
    return candidate
