"""Which worker kinds there are, and where they may run: `ragbus up`'s two processes, and the
kinds that must share the process that ingests while the stores are embedded.

Decisions only, from the settings and the kinds asked for: nothing here starts or imports a
role, so the command line can check a layout before anything loads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from infra.settings import Settings

STORE_OWNERS = frozenset({"search", "fuse", "ingest", "tool"})
"""Worker kinds that read or write the vector store (the embedded one belongs to their process)."""

UP_PARENT = ("classify", "generate", "critic")
"""What `ragbus up` runs next to the API and the saga when it uses two processes; every other
kind runs in the child. The store readers (search, fusion, tools) must run in the child, the
process that ingests (`embedded_layout_problem`). Generation and the critic read no store, and
in the parent they balance the two GILs: on NFCorpus at c = 8 the child held its GIL 86 % of
the time and the parent 51 %, and the move gave 7 % more q/s (docs/benchmarks.md)."""

WORKER_KINDS: tuple[str, ...] = (
    "classify",
    "search",
    "fuse",
    "generate",
    "critic",
    "tool",
    "ingest",
    "memory",
    "parse",
    "sources",
)
"""`parse` makes uploaded files into documents for `ingest`; it owns no store (it is not in
`STORE_OWNERS`), and `ragbus up` runs it in its worker child, off the API's process.
`sources` keeps the tenants' sources in sync (`workers.sources`): it reads folders and
publishes ingest jobs, and owns no store either."""


STORE_READERS = frozenset({"search", "fuse", "tool"})


def up_layout(
    settings: Settings, kinds: Sequence[str] = WORKER_KINDS
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """How `ragbus up` places `kinds`: (those of the process that serves the API and the
    saga, those of its worker child). One process when `RAGBUS_UP_PROCESSES` is 1, or when it
    is 0 on a single core; else `UP_PARENT` in the first and the rest in the child."""
    processes = settings.up_processes or (2 if (os.cpu_count() or 1) >= 2 else 1)
    if processes == 1:
        return tuple(kinds), ()
    parent = tuple(kind for kind in kinds if kind in UP_PARENT)
    return parent, tuple(kind for kind in kinds if kind not in UP_PARENT)


def embedded_layout_problem(settings: Settings, kinds: Sequence[str]) -> str | None:
    """Why these worker kinds cannot run together in one process, or None.

    The embedded stores (Qdrant Edge, the graph file) live in the process that opens them:
    another process loads them once and never sees what `ingest` writes later. So in
    embedded mode the kinds that read them run in the process that ingests."""
    embedded = [
        name
        for name, url in (("vectors", settings.qdrant_url), ("graph", settings.neo4j_uri))
        if not url
    ]
    readers = sorted(STORE_READERS.intersection(kinds))
    if not embedded or not readers or "ingest" in kinds:
        return None
    return (
        f"{', '.join(readers)} would read the embedded {' and '.join(embedded)} store, which "
        "only the process that ingests sees up to date: run it in that process (for example "
        "`ragbus worker search fuse tool ingest`, or `ragbus up`), or use the servers "
        "(RAGBUS_QDRANT_URL, RAGBUS_NEO4J_URI)"
    )


def replicas_wanted(settings: Settings, kinds: Sequence[str]) -> int:
    """How many search replicas a process running `kinds` starts (`launcher.replicas`):
    `RAGBUS_SEARCH_REPLICAS` when it owns the embedded stores (it ingests) and searches them;
    else none."""
    embedded = not settings.qdrant_url and not settings.neo4j_uri
    owns = "ingest" in kinds and "search" in kinds
    return settings.search_replicas if embedded and owns else 0
