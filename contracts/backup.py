"""What `ragbus backup` asks of the process that owns the embedded stores, and its answer
(`contracts.subjects.BACKUP_STORES`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.replicas import StoresVersion

STORE_PARTS = ("vectors", "graph", "memory")
"""The embedded stores, each a directory under the data directory, in a backup's `stores/`."""


class CopyStores(BaseModel):
    """Copy every embedded store, at one point, under `directory` (one directory a store)."""

    model_config = ConfigDict(extra="forbid")

    directory: str = Field(
        min_length=1,
        max_length=4096,
        description="An absolute path on the store owner's machine, empty or absent.",
    )
    stores: list[Literal["vectors", "graph", "memory"]] | None = Field(
        default=None,
        description="Only these stores (a search replica's copy needs no memory); all by default.",
    )


class StoresCopied(BaseModel):
    copied: list[str] = Field(default_factory=list, description="The stores copied.")
    external: list[str] = Field(
        default_factory=list,
        description="Stores on servers, which the operator backs up with the servers' tools.",
    )
    error: str | None = None
    version: StoresVersion | None = Field(
        default=None,
        description="The writes the copied vectors and graph hold (both embedded and copied).",
    )
