"""Index one document: chunk, embed (dense + sparse), extract entities, write both stores.

Entities come from the LLM (`infra.retrieval.entities_llm`, batches of chunks per request) when
`RAGBUS_LLM_BASE_URL` is set and `RAGBUS_LLM_ENTITIES` is on, else from the offline extractor.
A failing model never fails a document: its chunks are extracted offline and counted
(`entity_fallbacks` in the `entities_extracted` log line).

The sparse model is whichever `Resources.sparse()` gives (BM25, or BGE-M3's lexical weights,
made in the same model pass as the dense vectors).

Idempotent by construction: chunk ids are deterministic and each store replaces a document
as a whole, so redoing a document after a crash is harmless. The Qdrant write goes last
because its content hash is what marks the document as indexed.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from typing import Literal

import httpx

from contracts.ingest import DocumentIn
from infra.errors import TransientError
from infra.logging import get_logger
from infra.retrieval.chunking import Chunk, chunk_document
from infra.retrieval.entities import Entity, extract_all
from infra.retrieval.entities_llm import LLMEntityExtractor
from infra.retrieval.sparse import encode_documents
from infra.runtime.resources import Resources
from infra.tenancy.catalogue import DocumentMetadata

log = get_logger(__name__)


def store_hiccups() -> tuple[type[BaseException], ...]:
    """Store errors worth another delivery: the server was away, not the document wrong. A
    server store's client library is asked only where it was loaded (a Qdrant or Neo4j server
    is configured): with the embedded stores neither is imported, which saves a second and a
    half of every start."""
    found: list[type[BaseException]] = [httpx.TransportError]
    if "qdrant_client" in sys.modules:
        from qdrant_client.http.exceptions import ResponseHandlingException

        found.append(ResponseHandlingException)
    if "neo4j" in sys.modules:
        import neo4j.exceptions

        found += [
            neo4j.exceptions.ServiceUnavailable,
            neo4j.exceptions.SessionExpired,
            neo4j.exceptions.TransientError,
        ]
    return tuple(found)


class DocumentRejected(Exception):
    """The document itself cannot be indexed; retrying would not help."""


@dataclass(frozen=True)
class IndexOutcome:
    status: Literal["done", "unchanged"]
    chunks: int = 0
    entities: int = 0
    extractor: Literal["offline", "llm"] = "offline"
    entity_fallbacks: int = 0
    """Chunks the LLM extractor failed, extracted offline instead."""


async def _entities(resources: Resources, chunks: list[Chunk]) -> list[list[Entity]]:
    """Offline extraction, in the background process (it is CPU work no query waits for)."""
    return await resources.background().call(extract_all, [chunk.text for chunk in chunks])


def entity_extractor(resources: Resources) -> LLMEntityExtractor | None:
    """The LLM extractor when a model is configured and allowed to extract, else None."""
    client = resources.llm() if resources.settings.llm_entities else None
    return LLMEntityExtractor(client) if client is not None else None


async def extract_chunk_entities(
    resources: Resources, doc: DocumentIn, chunks: list[Chunk]
) -> tuple[list[list[Entity]], Literal["offline", "llm"], int]:
    """Entities per chunk, which extractor gave them, and how many chunks fell back offline."""
    extractor = entity_extractor(resources)
    if extractor is None:
        return await _entities(resources, chunks), "offline", 0
    try:
        found = await extractor.extract([chunk.text for chunk in chunks])
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a bug in the LLM path must not fail the document either
        log.warning("entities_llm_failed", document_id=doc.id, error=f"{type(exc).__name__}: {exc}")
        return await _entities(resources, chunks), "llm", len(chunks)
    log.info(
        "entities_extracted",
        document_id=doc.id,
        namespace=doc.namespace,
        extractor="llm",
        chunks=len(chunks),
        llm_chunks=found.llm_chunks,
        entity_fallbacks=found.fallback_chunks,
        requests=found.requests,
        dropped_names=found.dropped,
        reasons=found.reasons or None,
    )
    return found.entities, "llm", found.fallback_chunks


async def remove_document(resources: Resources, namespace: str, document_id: str) -> IndexOutcome:
    """Delete a document from both stores; `unchanged` when there was nothing to delete."""
    try:
        vectors = await resources.vectors()
        graph = await resources.graph()
        removed = await asyncio.to_thread(vectors.delete_document, namespace, document_id)
        await graph.delete_document(namespace, document_id)
        await DocumentMetadata(resources.redis()).drop(namespace, document_id)
    except store_hiccups() as exc:
        raise TransientError(f"{type(exc).__name__}: {exc}") from exc
    return IndexOutcome("done" if removed else "unchanged", chunks=removed)


async def index_document(resources: Resources, doc: DocumentIn) -> IndexOutcome:
    settings = resources.settings
    try:
        encoder = await resources.ingest_encoder()
        sparse_model = await resources.sparse()
        vectors = await resources.vectors()
        graph = await resources.graph()
        content_hash = doc.content_hash()
        metadata = doc.stored_metadata()  # with its readers (`contracts.access`)
        catalogue = DocumentMetadata(resources.redis())
        stored = await asyncio.to_thread(vectors.document_hash, doc.namespace, doc.id)
        if stored == content_hash:
            # one indexed before it: its metadata may be new
            await catalogue.put(doc.namespace, doc.id, metadata)
            return IndexOutcome("unchanged")
        chunks = chunk_document(doc, settings.chunk_chars, settings.chunk_overlap_chars)
        if not chunks:
            raise DocumentRejected("the document has no text to index")
        dense, sparse, sentences = await encode_documents(encoder, sparse_model, chunks)
        entities, extractor, fallbacks = await extract_chunk_entities(resources, doc, chunks)
        # the store that decides filters learns the new metadata (and readers) before the
        # graph holds the new text: `VectorStore.announce`
        await asyncio.to_thread(vectors.announce, doc.namespace, doc.id, metadata)
        await graph.upsert_document(doc.namespace, doc.id, doc.title, chunks, entities)
        await asyncio.to_thread(
            vectors.upsert_chunks,
            doc.namespace,
            chunks,
            dense,
            sparse,
            content_hash,
            sentences,
            metadata,
        )
        await catalogue.put(doc.namespace, doc.id, metadata)
    except store_hiccups() as exc:
        raise TransientError(f"{type(exc).__name__}: {exc}") from exc
    distinct = {entity.norm for found in entities for entity in found}
    return IndexOutcome(
        "done",
        chunks=len(chunks),
        entities=len(distinct),
        extractor=extractor,
        entity_fallbacks=fallbacks,
    )
