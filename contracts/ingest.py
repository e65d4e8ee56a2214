"""Batch ingestion: documents in, progress events out."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from contracts.access import ACCESS_KEY, DocumentAccess, unset, with_access
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


MAX_METADATA_DEPTH = 16
"""Objects and lists in a document's metadata nest at most this deep: what the stores' JSON
readers take (serde_json stops at 128), and far below where Python's own JSON recursion
fails (about 1,000 levels, which 16,000 characters of `[` reach)."""


def metadata_too_deep() -> str:
    return f"metadata nested more than {MAX_METADATA_DEPTH} levels deep"


def _depth(value: Any) -> int:
    """How deep objects and lists nest in `value`, found without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        level += 1
        deepest = max(deepest, level)
        if deepest > MAX_METADATA_DEPTH:
            return deepest
        stack.extend((child, level) for child in children)
    return deepest


def check_metadata(metadata: dict[str, Any]) -> None:
    """`ValueError` for metadata nested past `MAX_METADATA_DEPTH` or over
    `MAX_METADATA_CHARS` as JSON (the depth first: it bounds the size check's recursion), or
    holding the reserved key `_access` (a document's readers are its `access`)."""
    if ACCESS_KEY in metadata:
        raise ValueError(
            f"the metadata key {ACCESS_KEY!r} is reserved: name a document's readers in its "
            "`access` ({'groups': [...], 'users': [...]})"
        )
    if _depth(metadata) > MAX_METADATA_DEPTH:
        raise ValueError(metadata_too_deep())
    if len(json.dumps(metadata, default=str)) > MAX_METADATA_CHARS:
        raise ValueError(f"metadata over {MAX_METADATA_CHARS:,} characters as JSON")


MAX_PAGES = 10_000
"""Pages (or slides) one document may have: a file with more is refused at parsing."""
MAX_FILE_BYTES = 256 * 1024 * 1024
"""The largest file any upload may carry (the configured limit is at most this)."""


class PageSpan(BaseModel):
    """Where one page of a parsed file (a PDF page, an image, a slide) starts in its document's
    `text`: the page runs to the next span's `start`, or to the end. Chunks never cross a
    page, so each knows the page that holds its text."""

    model_config = ConfigDict(extra="forbid")

    number: int = Field(ge=1, le=MAX_PAGES, description="1-based, as the file counts them")
    start: int = Field(ge=0, le=MAX_DOCUMENT_CHARS, description="character offset in `text`")
    label: str = Field(
        default="",
        max_length=32,
        description='how a person names it: "p. 3", "slide 2"; empty means "p. <number>"',
    )

    def named(self) -> str:
        return self.label or f"p. {self.number}"


class FileRef(BaseModel):
    """An uploaded file as it waits in the JetStream object store (a claim check): messages
    carry this reference, never the file's bytes."""

    model_config = ConfigDict(extra="forbid")

    bucket: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    name: str = Field(min_length=1, max_length=512, description="the object's name in `bucket`")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0, le=MAX_FILE_BYTES)
    filename: str = Field(
        min_length=1, max_length=512, description="the name it was uploaded under"
    )
    media_type: str = Field(
        default="",
        max_length=128,
        description="what the uploader declared; parsing trusts the bytes, not this",
    )


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
    pages: list[PageSpan] = Field(
        default_factory=list,
        max_length=MAX_PAGES,
        description="a parsed file's pages, in order (empty for text sent as text)",
    )
    file: FileRef | None = Field(
        default=None, description="the original file this text was parsed from, kept"
    )
    access: DocumentAccess | None = Field(
        default=None,
        exclude_if=unset,
        description="the groups and users of the tenant that may read it (besides the "
        "tenant's own key); none named: every user of the tenant (`contracts.access`)",
    )

    @field_validator("metadata")
    @classmethod
    def _bounded_metadata(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        check_metadata(metadata)
        return metadata

    @field_validator("pages")
    @classmethod
    def _ordered_pages(cls, pages: list[PageSpan]) -> list[PageSpan]:
        starts = [page.start for page in pages]
        if starts != sorted(starts):
            raise ValueError("pages must be in the order of their starts")
        return pages

    def content_hash(self) -> str:
        """Identity of this version of the document: the broker dedupes re-sent copies by it.
        (A text document's hash is what it was before pages existed: stores keep it.)"""
        digest = hashlib.sha256()
        for part in (self.namespace, self.id, self.title, self.text):
            digest.update(part.encode())
            digest.update(b"\x00")
        if self.pages:
            digest.update(",".join(f"{p.number}:{p.start}:{p.label}" for p in self.pages).encode())
        if self.file is not None:
            digest.update(b"\x00file:" + self.file.sha256.encode())
        digest.update(DocumentAccess.identity(self.access))  # who reads it is kept too
        return digest.hexdigest()

    def stored_metadata(self) -> dict[str, Any]:
        """Its metadata as the stores keep it: with its readers under `_access`."""
        return with_access(self.metadata, self.access)


class FileDocument(BaseModel):
    """A file to parse into a document: what `DocumentIn` holds, but the file in place of the
    text (`rag.ingest.parse.<job>`: the parse worker makes the `DocumentIn`)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=256, pattern=DOCUMENT_ID_PATTERN)
    title: str = Field(default="", max_length=1000, description="empty: the file's own title")
    metadata: dict[str, Any] = Field(default_factory=dict)
    namespace: str = Field(default="default", pattern=STORE_NAMESPACE_PATTERN)
    file: FileRef
    access: DocumentAccess | None = Field(
        default=None,
        exclude_if=unset,
        description="the groups and users of the tenant that may read it (besides the "
        "tenant's own key); none named: every user of the tenant (`contracts.access`)",
    )

    @field_validator("metadata")
    @classmethod
    def _bounded_metadata(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        return DocumentIn._bounded_metadata(metadata)

    def content_hash(self) -> str:
        """This version's identity, as `DocumentIn.content_hash` is the text's."""
        digest = hashlib.sha256()
        for part in (self.namespace, self.id, self.title, self.file.sha256):
            digest.update(part.encode())
            digest.update(b"\x00")
        digest.update(json.dumps(self.metadata, sort_keys=True, default=str).encode())
        digest.update(DocumentAccess.identity(self.access))
        return digest.hexdigest()


class IngestDocument(Envelope):
    """One document of a job. `request_id` is the job id."""

    type: Literal["ingest.document"] = "ingest.document"
    document: DocumentIn


class IngestFile(Envelope):
    """One file of a job, to be parsed (`rag.ingest.parse.<job>`). `request_id` is the job id.
    The parse worker publishes the document it makes with this message's `event_id`, so the
    job counts the file once, whether it was parsed or refused."""

    type: Literal["ingest.file"] = "ingest.file"
    document: FileDocument


class IngestRefused(Envelope):
    """A file of a job that made no document (the parse worker refused it: damaged, encrypted,
    too long, no text …), on `rag.ingest.docs.<job>` with the file message's `event_id`: the
    ingest workers count it failed with the reason, as they count every document of a job, so
    whoever counts a job's last document also finishes the job."""

    type: Literal["ingest.refused"] = "ingest.refused"
    namespace: str = Field(default="default", pattern=STORE_NAMESPACE_PATTERN)
    document_id: str = Field(min_length=1, max_length=256, pattern=DOCUMENT_ID_PATTERN)
    reason: str = Field(min_length=1, max_length=2000)


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
    IngestDocument | IngestRefused | IngestDeletion | IngestJobSealed,
    Field(discriminator="type"),
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
    stage: Literal["parsed", "indexed", "waiting"] | None = Field(
        default=None,
        description="what just happened to `document_id`: a file `parsed` into its pages (not "
        "yet counted in the job), the document `indexed` (counted, done or failed), or a file "
        "`waiting` for its parse (`detail` says why: its tenant's parse budget)",
    )
    pages: int | None = Field(
        default=None, ge=0, description="with `parsed`: how many pages the file had"
    )
    detail: str | None = Field(
        default=None, max_length=2000, description="with `waiting`: why, and for how long"
    )


class IngestProgress(Envelope):
    type: Literal["ingest.progress"] = "ingest.progress"
    data: IngestProgressData
