"""The vector store: Qdrant Edge in this process by default, a Qdrant server when
`RAGBUS_QDRANT_URL` is set; both behind `VectorStore` (`infra.retrieval.vectors.base`)."""

from __future__ import annotations

from infra.logging import get_logger
from infra.retrieval.vectors.base import VectorStore
from infra.retrieval.vectors.points import Sentences, StoreMismatch
from infra.settings import Settings

__all__ = ["Sentences", "StoreMismatch", "VectorStore", "open_memory_store", "open_vector_store"]

MEMORY_SUFFIX = "-memory_"
"""On a Qdrant server, memory collections are named `ragbus-memory_...` (for the default
prefix `ragbus_`): outside the documents' prefix, so their listing never shows one."""

log = get_logger(__name__)


def open_vector_store(
    settings: Settings, dim: int, *, sparse_idf: bool = True, migrating: bool = False
) -> VectorStore:
    """A Qdrant server when `qdrant_url` is set, else the embedded Edge store under the data
    directory, which first refuses a data directory whose vectors are still in the old local
    mode (`infra.retrieval.vectors.legacy`).

    `sparse_idf`: whether new collections apply IDF to the sparse vectors (BM25: yes; learned
    weights: no) — `SparseModel.idf_modifier`. `migrating`: the store a migration writes to,
    opened while the old directory still exists."""
    if settings.qdrant_url:
        from qdrant_client import QdrantClient

        from infra.retrieval.vectors.qdrant import QdrantVectorStore

        client = QdrantClient(url=settings.qdrant_url, api_key=settings.qdrant_api_key)
        log.info("qdrant_server", url=settings.qdrant_url)
        return QdrantVectorStore(
            client, dim, settings.qdrant_collection_prefix, sparse_idf=sparse_idf
        )
    from infra.retrieval.vectors.edge import EdgeVectorStore
    from infra.retrieval.vectors.legacy import refuse_unmigrated

    if not migrating:
        refuse_unmigrated(settings)
    log.info("vectors_embedded", path=str(settings.vectors_path))
    return EdgeVectorStore(settings.vectors_path, dim, sparse_idf=sparse_idf)


def open_memory_store(settings: Settings, dim: int) -> VectorStore:
    """Semantic memory's own store (`infra.memory.semantic`): a directory of Edge shards apart
    from the documents', or collections under their own prefix on a Qdrant server, so no
    listing, search or migration of the documents ever meets a memory."""
    if settings.qdrant_url:
        from qdrant_client import QdrantClient

        from infra.retrieval.vectors.qdrant import QdrantVectorStore

        client = QdrantClient(url=settings.qdrant_url, api_key=settings.qdrant_api_key)
        prefix = settings.qdrant_collection_prefix.rstrip("_-") + MEMORY_SUFFIX
        return QdrantVectorStore(client, dim, prefix)
    from infra.retrieval.vectors.edge import EdgeVectorStore

    return EdgeVectorStore(settings.memory_path, dim)
