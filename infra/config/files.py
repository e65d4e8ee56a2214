"""The limits on an uploaded file and on parsing it: its size and pages, the parser's time
and memory, and the resolution scanned pages are read at. The hard ceilings come from the
ingest contract (`contracts.ingest`), which these settings may lower, never raise.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, Field, model_validator

from contracts.ingest import MAX_FILE_BYTES, MAX_PAGES

MIB = 1024 * 1024


class FileSettings(BaseModel):
    """Files and parsing: one group of `infra.settings.Settings`."""

    max_file_bytes: int = Field(
        100 * 1024 * 1024,
        ge=1,
        le=MAX_FILE_BYTES,
        description="The largest file an upload (`POST /v1/documents` as multipart, `ragbus "
        "ingest`) may carry; a batch with a larger one is refused whole (413).",
    )
    max_request_bytes: int = Field(
        320 * MIB,
        ge=1,
        description="The largest multipart upload (all its files and fields together): "
        "refused with 413 from its Content-Length, or once that many bytes have arrived.",
    )
    max_json_bytes: int = Field(
        32 * MIB,
        ge=64 * 1024,
        description="The largest body of any other request (JSON documents, questions): 413 "
        "from its Content-Length, or once that many bytes have arrived.",
    )
    tenant_max_transfers: int = Field(
        4,
        ge=1,
        description="File uploads and downloads one caller (one API key or token) may have "
        "running at once, per API process; one more is answered 429 with Retry-After, at the "
        "door.",
    )
    upload_min_free_mb: int = Field(
        1024,
        ge=0,
        description="Free disk (MiB) an upload must leave where uploads are spooled (the "
        "temporary directory); one that would leave less is answered 507 before it is read.",
    )
    parse_slots: int = Field(
        2,
        ge=1,
        le=16,
        description="Files a parse worker parses at once, each in a parser process of its own: "
        "a tenant's files take one at a time, so with two or more another tenant's file never "
        "waits for a flood to end.",
    )
    tenant_parse_pages_per_hour: int = Field(
        20_000,
        ge=0,
        description="Pages a tenant's files may have parsed an hour (a bucket of an hour's "
        "worth, refilled continuously); past it its files wait. The default tenant (a `none` "
        "or `token` install's, and the CLI's) has none. 0 = no limit.",
    )
    tenant_parse_seconds_per_hour: float = Field(
        3600.0,
        ge=0,
        description="Parser seconds a tenant's files may take an hour, as above. 0 = no limit.",
    )
    parse_timeout_s: float = Field(
        120.0,
        gt=0,
        description="Wall-clock limit of parsing one file (OCR included); a parser that runs "
        "longer is killed and the file dead-lettered.",
    )
    parse_memory_mb: int = Field(
        1536,
        ge=64,
        description="Address space a parser process may use (RLIMIT_AS); one that needs more "
        "is killed and its file dead-lettered.",
    )
    max_pages: int = Field(
        2000,
        ge=1,
        le=MAX_PAGES,
        description="Pages (or slides, or images) a file may have; one with more is refused.",
    )
    ocr_dpi: int = Field(
        200,
        ge=50,
        le=600,
        description="Resolution scanned pages are rendered at for OCR.",
    )

    @model_validator(mode="after")
    def _request_holds_a_file(self) -> Self:
        if self.max_request_bytes < self.max_file_bytes:
            raise ValueError(
                "RAGBUS_MAX_REQUEST_BYTES must be at least RAGBUS_MAX_FILE_BYTES: an upload of "
                "the largest file must fit in a request"
            )
        return self
