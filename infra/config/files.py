"""The limits on an uploaded file and on parsing it: its size and pages, the parser's time
and memory, and the resolution scanned pages are read at. The hard ceilings come from the
ingest contract (`contracts.ingest`), which these settings may lower, never raise.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from contracts.ingest import MAX_FILE_BYTES, MAX_PAGES


class FileSettings(BaseModel):
    """Files and parsing: one group of `infra.settings.Settings`."""

    max_file_bytes: int = Field(
        100 * 1024 * 1024,
        ge=1,
        le=MAX_FILE_BYTES,
        description="The largest file an upload (`POST /v1/documents` as multipart, `ragbus "
        "ingest`) may carry; a batch with a larger one is refused whole (413).",
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
