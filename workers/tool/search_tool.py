"""The `search` tool: dense retrieval over the indexed documents, from the tool worker itself.

It queries the vector store through `Resources` in this process (encoder + Qdrant) rather
than going round the bus or the HTTP API: no second request, no saga inside a saga, and
no deadline of its own to juggle. The embedded store (Qdrant Edge) belongs to one process,
so the tool worker then runs in the store's process (`ragbus up` puts it there); with
`RAGBUS_QDRANT_URL` set it runs anywhere.
"""

from __future__ import annotations

from typing import Any, Final

from contracts.access import scoped
from contracts.filters import FilterError, parse_filter
from contracts.tenancy import store_namespace
from contracts.tools import SEARCH
from infra.runtime.resources import Resources
from workers.tool.registry import (
    ToolError,
    ToolRegistry,
    calling_filter,
    calling_reader,
    calling_tenant,
)

DEFAULT_TOP_K: Final = 5
PASSAGE_CHARS: Final = 600


def register_search(registry: ToolRegistry, resources: Resources) -> None:
    @registry.implement(SEARCH)
    async def search(
        query: str,
        namespace: str = "default",
        top_k: int = DEFAULT_TOP_K,
        filter: dict[str, Any] | None = None,
    ) -> str:
        if filter is not None:
            try:
                parse_filter(filter)
            except FilterError as exc:
                raise ToolError(f"filter: {exc}") from None
        # the call's own filter narrows the request's, never widens it; and the request's
        # user reads only what it may (`contracts.access`), whatever either filter says
        asked = [f for f in (calling_filter.get(), filter) if f is not None]
        where = scoped(
            asked[0] if len(asked) == 1 else {"$and": asked} if asked else None,
            calling_reader.get(),
        )
        encoder = await resources.encoder()
        vector = [float(x) for x in (await encoder.aencode([query]))[0]]
        store = await resources.vectors()
        space = store_namespace(calling_tenant.get(), namespace)  # the caller's own, only
        found = await store.read(
            store.search_dense, [space], vector, top_k, where, heavy=not store.quick([space], where)
        )
        chunks = await store.read(store.hydrate, found)
        if not chunks:
            return f"no passages found for {query!r} in namespace {namespace!r}"
        lines = []
        for number, chunk in enumerate(chunks, start=1):
            title = chunk.title or chunk.document_id
            text = " ".join(chunk.text.split())[:PASSAGE_CHARS]
            lines.append(f"[{number}] {title} (chunk {chunk.chunk_id}): {text}")
        return "\n".join(lines)
