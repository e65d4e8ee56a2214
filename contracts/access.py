"""Who may read a document, inside a tenant: its readers, and the reader a question asks for.

A tenant's own API key is the tenant's administrator: it reads everything the tenant keeps and
makes the tenant's users (`POST /v1/users`). A user has a key of their own and belongs to
groups. A document may name the groups and users that may read it (`access`); one that names
none stays tenant-wide, as every document was before users existed.

A document's readers are kept beside its metadata, under the reserved key `_access`
(`ACCESS_KEY`), as one flat list of principals: `group:<name>` and `user:<name>`. A caller's
metadata may not hold that key (`check_metadata` refuses it), so only `access` writes it. A
user's question carries the user as a `Reader`; every place that narrows passages by a
metadata filter (the vector store's payload filter, the embedded store's documents table, the
graph's scope, the bridge, the `search` tool) narrows them by `readable_by(reader)` too, ANDed
with the question's own filter (`scoped`), never written into it: the question's filter stays
the one the caller sent, and its bounds stay the caller's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from contracts.filters import All, AnyOf, Condition, Node, matches, parse_filter

ACCESS_KEY: Final = "_access"
"""The reserved metadata key a document's readers are kept under."""
PRINCIPAL_PATTERN: Final = r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$"
"""A user's or a group's name: 1-64 lowercase letters, digits and inner `.`, `_` or `-`."""
MAX_USER_GROUPS: Final = 64
"""Groups one user belongs to, at most (a user's question carries them all)."""
MAX_DOCUMENT_READERS: Final = 256
"""Groups, and users, one document names at most (each)."""

PrincipalName = Annotated[str, StringConstraints(pattern=PRINCIPAL_PATTERN)]


def unset(value: object) -> bool:
    """`exclude_if` for `reader` and `access`: a message leaves the field out when it is not
    set, so a worker of the release before users (whose models forbid unknown fields) still
    takes every message that needs none, through a rolling upgrade."""
    return value is None


def unique_names(names: Iterable[str]) -> list[str]:
    """Names each once, sorted: how a document's readers and a user's groups are kept."""
    return sorted(set(names))


class DocumentAccess(BaseModel):
    """Who may read a document besides the tenant's key: the groups and users it names. Both
    empty (or no `access` at all): every user of the tenant."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    groups: list[PrincipalName] = Field(default_factory=list, max_length=MAX_DOCUMENT_READERS)
    users: list[PrincipalName] = Field(default_factory=list, max_length=MAX_DOCUMENT_READERS)

    @field_validator("groups", "users")
    @classmethod
    def _sorted(cls, names: list[str]) -> list[str]:
        return unique_names(names)

    def principals(self) -> list[str]:
        """What `_access` keeps: `group:<name>`, then `user:<name>`, each once."""
        return [f"group:{g}" for g in self.groups] + [f"user:{u}" for u in self.users]

    @staticmethod
    def identity(access: DocumentAccess | None) -> bytes:
        """What a document's readers add to its content hash: nothing when it names none (so
        a tenant-wide document's hash is what it was before readers existed)."""
        principals = access.principals() if access is not None else []
        return b"\x00access:" + ",".join(principals).encode() if principals else b""

    @classmethod
    def of(cls, metadata: Mapping[str, Any]) -> DocumentAccess | None:
        """The access a stored document's metadata names (None: tenant-wide)."""
        kept = metadata.get(ACCESS_KEY)
        if not isinstance(kept, list) or not kept:
            return None
        groups = [p.removeprefix("group:") for p in kept if str(p).startswith("group:")]
        users = [p.removeprefix("user:") for p in kept if str(p).startswith("user:")]
        return cls(groups=groups, users=users)


def with_access(metadata: Mapping[str, Any], access: DocumentAccess | None) -> dict[str, Any]:
    """A document's metadata as the stores keep it: its readers under `_access` when it names
    any (a tenant-wide document keeps no `_access`)."""
    kept = dict(metadata)
    principals = access.principals() if access is not None else []
    if principals:
        kept[ACCESS_KEY] = principals
    return kept


def without_access(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A stored document's metadata as its caller sent it (`_access` is shown as `access`)."""
    return {key: value for key, value in metadata.items() if key != ACCESS_KEY}


class Reader(BaseModel):
    """The user a question reads for: what it may draw on is what `readable_by` lets through.
    A request without a reader is the tenant key's, and reads everything of the tenant."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    user: PrincipalName
    groups: tuple[PrincipalName, ...] = Field(default=(), max_length=MAX_USER_GROUPS)

    @field_validator("groups")
    @classmethod
    def _sorted_groups(cls, groups: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(unique_names(groups))

    def principals(self) -> tuple[str, ...]:
        return (f"user:{self.user}", *(f"group:{g}" for g in self.groups))


@lru_cache(maxsize=1024)
def readable_by(reader: Reader) -> Node:
    """The documents `reader` may read, as a filter tree: those that name no readers, and
    those that name the user or one of the user's groups. Built directly (never parsed), so a
    question's own filter keeps the whole of its bounds (`contracts.filters`). One tree a
    reader (a `Reader` is frozen): every channel, and the catalogue's check of each document,
    share it."""
    return AnyOf(
        (
            Condition(ACCESS_KEY, "exists", False),
            Condition(ACCESS_KEY, "in", reader.principals()),
        )
    )


def scoped(raw: Mapping[str, Any] | None, reader: Reader | None) -> Node | None:
    """What a command may draw on: its filter AND its reader's access, either alone, or None
    for everything (a filter is validated when its command is: parsed again here)."""
    parts: list[Node] = []
    if raw is not None:
        parts.append(parse_filter(raw))
    if reader is not None:
        parts.append(readable_by(reader))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else All(tuple(parts))


def may_read(reader: Reader | None, metadata: Mapping[str, Any]) -> bool:
    """Whether `reader` (None: the tenant's key) may read a document with this stored
    metadata: the catalogue's, a download's and a deletion's check."""
    return reader is None or matches(readable_by(reader), metadata)


def session_space(tenant: str, reader: Reader | None) -> str:
    """Where a caller's sessions and memories are kept: the tenant's own for its key, each
    user's apart within it (`<tenant>/@<user>`: no session id or scope name holds `@`), so
    one user never reads, continues or forgets another's conversation."""
    return tenant if reader is None else f"{tenant}/@{reader.user}"
