"""What the store owner and its search replicas say to each other (core NATS, the service
account's alone): which writes a copy of the stores holds, which copy a replica serves from,
and a search command handed to one (`contracts.subjects.SEARCH_REPLICAS`, `STORES_VERSION`,
`search_replica_subject`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.commands import SearchCommand
from contracts.enums import Channel

REPLICA_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,31}$"


class StoresVersion(BaseModel):
    """Which writes the embedded stores hold: the owning process's token (a new one each time
    the stores are opened) and how many writes each store has taken since. Two versions are
    equal exactly when they name the same writes; a copy made at one version holds every
    write acknowledged before it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    owner: str = Field(min_length=1, max_length=64, description="The owning process's token.")
    vectors: int = Field(ge=0, description="Writes to the vector store (points, metadata).")
    graph: int = Field(ge=0, description="Changes to the graph (documents, communities).")


class ReplicaSeen(BaseModel):
    """A search replica's announcement: the copy it serves from (None while it has none)."""

    model_config = ConfigDict(extra="forbid")

    replica: str = Field(pattern=REPLICA_ID_PATTERN)
    version: StoresVersion | None = None
    running: int = Field(default=0, ge=0, description="Commands it is answering now.")
    answered: int = Field(default=0, ge=0, description="Commands it has answered since it began.")
    note: str = Field(default="", max_length=500, description="Why it has no copy, if so.")


class ReplicaTask(BaseModel):
    """A search command handed to a replica, with the version its copy must hold."""

    model_config = ConfigDict(extra="forbid")

    version: StoresVersion
    channel: Channel
    command: SearchCommand
    deliveries: int = Field(default=1, ge=1, description="The command's delivery count.")


class ReplicaAnswer(BaseModel):
    """`done`: the replica answered the command (its result is published); `stale`: its copy
    is behind the version asked, and it did nothing; `failed`: it tried and failed, and the
    owner answers the command itself."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["done", "stale", "failed"]
    error: str | None = Field(default=None, max_length=2000)
