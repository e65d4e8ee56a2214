"""The documents a filtered request may draw on, for the stores that keep no metadata.

The vector store filters its own searches: every chunk carries its document's metadata
(`infra.retrieval.vectors.filtering`). The graph keeps entities, mentions and communities, not
metadata; the fusion's bridge reads the graph. They narrow their answers to a `Scope`: the
`(namespace, document id)` pairs whose metadata passes the filter, asked of the vector store
once a command (`VectorStore.matching_documents`), off the event loop the first time the store
decides that filter (`VectorStore.quick`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from contracts.access import Reader, scoped
from contracts.filters import Node

if TYPE_CHECKING:
    from infra.retrieval.vectors.base import VectorStore


@dataclass(frozen=True)
class Scope:
    """The documents a request may draw on: `(namespace, document id)` pairs."""

    documents: frozenset[tuple[str, str]]

    def allows(self, namespace: str, document_id: str) -> bool:
        return (namespace, document_id) in self.documents

    @cached_property
    def by_namespace(self) -> dict[str, frozenset[str]]:
        """The document ids of each namespace: what a graph compares its own with (`within`)."""
        found: dict[str, set[str]] = {}
        for namespace, document_id in self.documents:
            found.setdefault(namespace, set()).add(document_id)
        return {namespace: frozenset(ids) for namespace, ids in found.items()}


def where_of(raw: Mapping[str, Any] | None, reader: Reader | None = None) -> Node | None:
    """A command's filter (validated when the command was), ANDed with what its reader may
    read (`contracts.access`), as the tree stores take; None: everything."""
    return scoped(raw, reader)


async def document_scope(
    store: VectorStore,
    namespaces: Sequence[str],
    raw: Mapping[str, Any] | None,
    reader: Reader | None = None,
) -> Scope | None:
    """The documents of `namespaces` that pass the filter and that the reader may read; None
    without either (everything)."""
    where = where_of(raw, reader)
    if where is None:
        return None

    def read() -> frozenset[tuple[str, str]]:
        return frozenset(
            (namespace, document_id)
            for namespace in dict.fromkeys(namespaces)
            for document_id in store.matching_documents(namespace, where)
        )

    if store.quick(namespaces, where):  # decided before: no thread hop
        return Scope(read())
    return Scope(await asyncio.to_thread(read))
