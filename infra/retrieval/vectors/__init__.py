"""The vector store: Qdrant Edge in this process by default, a Qdrant server when
`RAGBUS_QDRANT_URL` is set; both behind `VectorStore` (`infra.retrieval.vectors.base`)."""

from __future__ import annotations

from infra.logging import get_logger
from infra.retrieval.vectors.base import Sentences, StoreMismatch, VectorStore
from infra.settings import Settings

__all__ = ["Sentences", "StoreMismatch", "VectorStore", "open_vector_store"]

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
