"""The graph model both backends share: keys, the store interface, hits and communities."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from contracts.models import RetrievedChunk
from infra.logging import get_logger
from infra.retrieval.chunking import Chunk
from infra.retrieval.entities import Entity
from infra.retrieval.scope import Scope

log = get_logger(__name__)


Embed = Callable[[list[str]], Awaitable[np.ndarray]]
"""Turns community summaries into vectors (e.g. `Encoder.aencode`)."""


@dataclass(frozen=True)
class CommunityBrief:
    """What a summariser is told about one community."""

    key: str
    namespace: str
    entities: list[str]
    """Names of its strongest entities, strongest first."""
    sentences: list[str]
    """A few sentences from its most central chunks."""
    extractive: str
    """The extractive summary, kept whenever the summariser fails."""


Summarise = Callable[[CommunityBrief], Awaitable[str]]
"""Writes a community's summary (e.g. `LLMCommunitySummariser`); may raise."""

EXACT, TOKEN, PREFIX = 1.0, 0.6, 0.5
"""How much a query norm trusts an entity it meets exactly, as one word of it, or as a prefix."""
MIN_PREFIX = 3
EXPAND_FROM = 5
NEIGHBOURS = 8
PPR_HOPS = 2
PPR_FRONTIER = 20
PPR_ENTITIES = 60
PPR_SHARE = 0.4
"""A chunk reached only by the walk scores at most this share of the best direct match."""
PPR_DAMPING = 0.5
"""HippoRAG's damping: half the walk's mass stays near the query's own entities."""
COMMUNITIES_PER_QUERY = 3
CHUNKS_PER_COMMUNITY = 20
COMMUNITY_ENTITIES_PER_CHUNK = 12
SUMMARY_ENTITIES = 6
BRIEF_ENTITIES = 10
BRIEF_CHUNKS = 3
BRIEF_SENTENCES_PER_CHUNK = 2
GENERIC_SHARE = 0.02
GENERIC_MIN_DF = 20
WALK_MAX_DF = 500
"""The walk never expands from an entity in more chunks than this, however big the corpus:
finding its neighbours costs O(its chunks), and so common an entity links everything."""


def generic_df(total_chunks: int) -> float:
    """An entity mentioned in more chunks than this is generic: in more than `GENERIC_SHARE`
    of them (and `GENERIC_MIN_DF`), or in `WALK_MAX_DF` whatever the corpus."""
    return min(max(GENERIC_MIN_DF, GENERIC_SHARE * total_chunks), WALK_MAX_DF)


MATCHES_PER_NORM = 16
"""Entities one query norm may match at most in a local search (the strongest: an exact match
first, then by IDF): the number of matches, not the corpus, sets the search's cost."""
WALK_SCAN = 64
"""Chunks of an entity the walk reads to find its neighbours (its first by id, a fixed
sample): an entity's strongest co-occurrences show in any fair sample of its chunks."""
MENTIONS_CAP = 500
"""Chunks one entity scores at most (the lowest chunk ids, a fixed sample; NFCorpus's "generic"
cut is 186 chunks, so only such entities are sampled there): at 300k chunks a
common entity is in tens of thousands, and its low IDF adds little to any of them. With the
walk's bound, this keeps a local search's cost flat in the corpus size."""


def entity_key(namespace: str, norm: str) -> str:
    return f"{namespace}|{norm}"


@runtime_checkable
class GraphStore(Protocol):
    async def upsert_document(
        self,
        namespace: str,
        document_id: str,
        title: str,
        chunks: Sequence[Chunk],
        chunk_entities: Sequence[Sequence[Entity]],
    ) -> None:
        """Replace everything the graph knew about this document."""

    async def delete_document(self, namespace: str, document_id: str) -> None: ...

    async def local_search(
        self,
        namespaces: Sequence[str],
        query_norms: Sequence[str],
        top_k: int,
        scope: Scope | None = None,
    ) -> list[RetrievedChunk]:
        """Chunks that mention the query's entities (with a `scope`, of its documents only)."""

    async def global_search(
        self,
        namespaces: Sequence[str],
        query_norms: Sequence[str],
        query_vector: Sequence[float] | None,
        top_k: int,
        scope: Scope | None = None,
    ) -> list[RetrievedChunk]:
        """Chunks of the communities the query is about (with a `scope`, of its documents)."""

    async def documents_about(
        self, namespaces: Sequence[str], norms: Sequence[str]
    ) -> list[RetrievedChunk]:
        """The first chunk of each document whose title names one of `norms` (see
        `infra.retrieval.entities.title_norms`), in the order of `norms`: what the graph knows
        *about* an entity, as opposed to where it is merely mentioned."""

    async def particular_titles(self, namespaces: Sequence[str], norms: Sequence[str]) -> list[str]:
        """Of `norms`, those that title a document and name a particular thing: mentioned in
        no more chunks than a generic entity (`generic_df`) in the document's namespace. "Diet"
        titles a page of a nutrition collection and is in 7 % of its chunks; "Publix" is in
        two."""

    async def chunk_entities(self, chunk_ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """The entities ingestion found in each chunk, as `(norm, kind)` in the order they were
        found: what the query path reads instead of extracting them again."""

    async def recompute_communities(
        self, embed: Embed | None = None, summarise: Summarise | None = None
    ) -> int:
        """Detect communities again; returns how many there are. `embed` and `summarise`
        are remembered for later (lazy) recomputes; without a summariser the summaries are
        extractive."""

    async def stats(self) -> dict[str, Any]: ...

    async def ping(self) -> bool: ...

    async def aclose(self) -> None: ...


# =========================================================================== shared ranking


@dataclass(frozen=True)
class Hit:
    """A query norm meeting an entity."""

    query: str
    key: str
    namespace: str
    weight: float
    df: int
    community: str | None = None


@dataclass
class Community:
    key: str
    namespace: str
    members: list[str]
    chunk_ids: list[str]
    summary: str = ""
    vector: list[float] | None = None
