"""Batch ingestion: documents in, progress events out."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from contracts.envelope import Envelope
from contracts.queries import STORE_NAMESPACE_PATTERN

MAX_DOCUMENT_CHARS = 2_000_000
MAX_METADATA_CHARS = 16_000
DOCUMENT_ID_PATTERN = (
    r"^[^\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+$"
)
"""No white space: spelled out, because `\\s` means other characters to Python, to the Rust
regex engine pydantic uses, and to the ECMA-262 engines JSON Schema validators use (U+0085
is white space to the first two only), and the OpenAPI must say what the server accepts."""


class DocumentIn(BaseModel):
    """A document as producers submit it (`POST /v1/documents`, `ragbus ingest`)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=256, pattern=DOCUMENT_ID_PATTERN)
    title: str = Field(default="", max_length=1000)
    text: str = Field(min_length=1, max_length=MAX_DOCUMENT_CHARS)
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description=f"Free-form, up to {MAX_METADATA_CHARS:,} characters as JSON.",
    )
    namespace: str = Field(default="default", pattern=STORE_NAMESPACE_PATTERN)

    @field_validator("metadata")
    @classmethod
    def _bounded_metadata(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(metadata, default=str)) > MAX_METADATA_CHARS:
            raise ValueError(f"metadata over {MAX_METADATA_CHARS:,} characters as JSON")
        return metadata

    def content_hash(self) -> str:
        """Identity of this version of the document: the broker dedupes re-sent copies by it."""
        digest = hashlib.sha256()
        for part in (self.namespace, self.id, self.title, self.text):
            digest.update(part.encode())
            digest.update(b"\x00")
        return digest.hexdigest()


class IngestDocument(Envelope):
    """One document of a job. `request_id` is the job id."""

    type: Literal["ingest.document"] = "ingest.document"
    document: DocumentIn


class IngestDeletion(Envelope):
    """Remove a document's chunks, vectors and graph facts everywhere. `request_id` is the job."""

    type: Literal["ingest.delete"] = "ingest.delete"
    namespace: str = Field(default="default", pattern=STORE_NAMESPACE_PATTERN)
    document_id: str = Field(min_length=1, max_length=256, pattern=DOCUMENT_ID_PATTERN)


class IngestJobSealed(Envelope):
    """Sent after the last document: how many the job holds, so completion can be known."""

    type: Literal["ingest.sealed"] = "ingest.sealed"
    expected: int = Field(ge=0, description="documents accepted by the broker for this job")
    duplicates: int = Field(default=0, ge=0, description="re-sent copies the broker dropped")


IngestMessage = Annotated[
    IngestDocument | IngestDeletion | IngestJobSealed, Field(discriminator="type")
]
ingest_message_adapter: TypeAdapter[IngestMessage] = TypeAdapter(IngestMessage)


class JobCounts(BaseModel):
    """Where an ingest job stands: what progress events carry and the API reports."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["running", "completed", "failed"]
    expected: int | None = None
    documents_done: int = 0
    documents_failed: int = 0
    documents_unchanged: int = 0
    duplicates: int = 0
    chunks: int = 0
    entities: int = 0


class IngestProgressData(JobCounts):
    document_id: str | None = None
    error: str | None = None


class IngestProgress(Envelope):
    type: Literal["ingest.progress"] = "ingest.progress"
    data: IngestProgressData
