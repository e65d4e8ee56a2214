"""Sources kept in sync: a folder (later a web site or a bucket) that ragbus owns, declared
once and kept current by the sources workers (`workers.sources`), each sync an ingest job.

A source is its tenant's, named by a short name unique within the tenant. Its documents go to
one namespace of the tenant, with the source's metadata and readers stamped on each, and the
source's name under the reserved metadata key `_source`, so that two sources (or a person's
own uploads) filling one namespace never replace each other's documents.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    SerializationInfo,
    StringConstraints,
    field_serializer,
    field_validator,
    model_validator,
)

from contracts.access import DocumentAccess, unset
from contracts.envelope import Envelope, utcnow
from contracts.ingest import check_metadata
from contracts.queries import MAX_CALLER_NAMESPACE_CHARS, NAMESPACE_PATTERN

SOURCE_NAME_PATTERN: Final = r"^[a-z0-9](?:[a-z0-9-]{0,46}[a-z0-9])?$"
"""1-48 lowercase letters, digits and inner `-`: a key token in JetStream KV, a path segment."""
SourceName = Annotated[str, StringConstraints(pattern=SOURCE_NAME_PATTERN)]
SOURCE_KEY: Final = "_source"
"""The metadata key naming the source a document came from (reserved, as `_access` is)."""
MAX_PATTERNS: Final = 32
MAX_PATTERN_CHARS: Final = 256
MAX_LOCATION_CHARS: Final = 2_000
MIN_EVERY_S: Final = 1.0
"""The shortest schedule a source may ask for (the settings' floor is usually higher:
`RAGBUS_SOURCE_MIN_EVERY_S`)."""
MAX_EVERY_S: Final = 30 * 86_400.0

SourceKind = Literal["folder", "web", "s3"]
"""What a source reads:
- `folder`, a folder tree on the machines the sources workers run on (under a root the
  operator allowed: `RAGBUS_SOURCE_ROOTS`);
- `web`, a web site: the pages its sitemap lists (a sitemap's URL, or the site's, whose
  robots.txt or /sitemap.xml names it), else those found by crawling within its host;
  robots.txt is honoured;
- `s3`, an S3-compatible bucket (`s3://bucket/prefix`), AWS's or another's (`s3.endpoint_url`)."""
MAX_WEB_PAGES: Final = 100_000
KEEP_SECRETS: Final = "keep_secrets"


class S3Options(BaseModel):
    """How to reach an S3-compatible bucket. Without keys, the sources workers' own AWS
    credentials (environment, instance role) are used; `anonymous` for a public bucket."""

    model_config = ConfigDict(extra="forbid")

    endpoint_url: str | None = Field(
        default=None, max_length=MAX_LOCATION_CHARS, description="null: AWS S3 itself"
    )
    region: str | None = Field(default=None, max_length=64)
    access_key_id: str | None = Field(default=None, max_length=256)
    secret_access_key: SecretStr | None = Field(
        default=None, max_length=256, description="kept, never shown back"
    )
    anonymous: bool = False

    @field_serializer("secret_access_key", when_used="json")
    def _masked(self, value: SecretStr | None, info: SerializationInfo) -> str | None:
        """Masked in every answer; kept whole only where ragbus stores the source
        (`SourceRecord.stored_json`)."""
        if value is None:
            return None
        keep = bool((info.context or {}).get(KEEP_SECRETS))
        return value.get_secret_value() if keep else "**********"


class WebOptions(BaseModel):
    """How far a web site is read."""

    model_config = ConfigDict(extra="forbid")

    max_pages: int = Field(
        default=1_000, ge=1, le=MAX_WEB_PAGES, description="pages listed at most per sync"
    )
    crawl: bool = Field(
        default=True,
        description="without a sitemap, find the pages by following links within the host",
    )


Pattern = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PATTERN_CHARS)]


class SourceSpec(BaseModel):
    """A source as its tenant declares it (`POST /v1/sources`, `ragbus source add`)."""

    model_config = ConfigDict(extra="forbid")

    name: SourceName = Field(description="1-48 lowercase letters, digits or inner '-'")
    kind: SourceKind = "folder"
    location: str = Field(
        min_length=1,
        max_length=MAX_LOCATION_CHARS,
        description="folder: an absolute path under one of the operator's RAGBUS_SOURCE_ROOTS; "
        "web: an http(s) URL (a site, or its sitemap); s3: `s3://bucket/prefix`",
    )
    namespace: str = Field(
        default="default", pattern=NAMESPACE_PATTERN, max_length=MAX_CALLER_NAMESPACE_CHARS
    )
    every_s: float | None = Field(
        default=None,
        ge=MIN_EVERY_S,
        le=MAX_EVERY_S,
        description="sync on a schedule, every this many seconds (null: no schedule)",
    )
    watch: bool = Field(
        default=False,
        description="sync as soon as the OS says a file changed (folder only: inotify)",
    )
    include: list[Pattern] = Field(
        default_factory=list,
        max_length=MAX_PATTERNS,
        description="glob patterns of paths (relative to the source, `**` for any folders) "
        "to read; none: every file of a kind ragbus reads",
    )
    exclude: list[Pattern] = Field(
        default_factory=list,
        max_length=MAX_PATTERNS,
        description="glob patterns of paths never read (they win over `include`)",
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="stamped on every document of the source"
    )
    s3: S3Options | None = Field(default=None, description="s3 only: how to reach the bucket")
    web: WebOptions | None = Field(default=None, description="web only: how far to read")
    access: DocumentAccess | None = Field(
        default=None,
        exclude_if=unset,
        description="the groups and users of the tenant that may read its documents",
    )

    @field_validator("metadata")
    @classmethod
    def _bounded_metadata(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        check_metadata(metadata)
        if SOURCE_KEY in metadata:
            raise ValueError(f"the metadata key {SOURCE_KEY!r} is reserved: it names the source")
        return metadata

    @model_validator(mode="after")
    def _kind_fits(self) -> SourceSpec:
        if self.watch and self.kind != "folder":
            raise ValueError("only a folder can be watched: give a web site or a bucket every_s")
        if self.s3 is not None and self.kind != "s3":
            raise ValueError("`s3` options are for sources of kind s3")
        if self.web is not None and self.kind != "web":
            raise ValueError("`web` options are for sources of kind web")
        if self.kind == "web" and not self.location.startswith(("http://", "https://")):
            raise ValueError("a web source's location is an http(s) URL")
        if self.kind == "s3" and not self.location.startswith("s3://"):
            raise ValueError("an s3 source's location is s3://bucket/prefix")
        return self


class SourceRecord(SourceSpec):
    """A source as ragbus keeps it: the spec, whose it is and where its documents go."""

    tenant: str
    store_namespace: str = Field(description="the namespace the stores keep its documents in")
    created_at: datetime = Field(default_factory=utcnow)
    removing: bool = Field(
        default=False, description="removed, its documents being deleted: it syncs no more"
    )

    def stored_json(self) -> str:
        """The record as the registry keeps it: its secrets whole."""
        return self.model_dump_json(context={KEEP_SECRETS: True})

    def stamped(self, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """The metadata each of its documents carries: the source's, and its name."""
        return {**self.metadata, **(metadata or {}), SOURCE_KEY: self.name}


SyncReason = Literal["requested", "schedule", "watch", "created", "removed"]
"""Why a sync runs; `removed`: the source was removed with its documents, which it deletes."""


class SyncSource(Envelope):
    """Sync one source now (`rag.cmd.sources`). `request_id` is the ingest job the sync runs
    as."""

    type: Literal["source.sync"] = "source.sync"
    tenant: str = Field(min_length=1, max_length=32)
    source: SourceName
    reason: SyncReason = "requested"


class SyncCounts(BaseModel):
    """What a sync found, by what it did with each path."""

    listed: int = 0
    added: int = 0
    changed: int = 0
    deleted: int = 0
    moved: int = 0
    touched: int = 0
    """Paths whose stat changed but whose bytes did not: nothing was sent."""
    skipped: int = 0
    """Paths passed over (unreadable, over the size limit, no document id), each logged."""


class SyncRun(BaseModel):
    """A source's last sync, as JetStream KV keeps it (`infra.sources.state`)."""

    job_id: str
    reason: SyncReason = "requested"
    status: Literal["planning", "publishing", "published", "failed"] = "planning"
    started_at: datetime = Field(default_factory=utcnow)
    published_at: datetime | None = None
    counts: SyncCounts = Field(default_factory=SyncCounts)
    error: str | None = None
