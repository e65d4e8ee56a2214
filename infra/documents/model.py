"""What parsing makes (`ParsedDocument`), the limits it works under (`ParseLimits`), and the
two ways it fails (`ParseRefused`: the file is at fault; `ParserFailed`: the parser is)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from contracts.ingest import MAX_DOCUMENT_CHARS, MAX_FILE_BYTES, MAX_PAGES, PageSpan

PDF = "application/pdf"
PNG = "image/png"
JPEG = "image/jpeg"
TIFF = "image/tiff"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
HTML = "text/html"
MARKDOWN = "text/markdown"
TEXT = "text/plain"

IMAGES = frozenset({PNG, JPEG, TIFF})

SUPPORTED_SUFFIXES: frozenset[str] = frozenset(
    {
        ".pdf",
        ".png",
        ".jpg",
        ".jpeg",
        ".tif",
        ".tiff",
        ".docx",
        ".pptx",
        ".html",
        ".htm",
        ".md",
        ".markdown",
        ".txt",
    }
)
"""The file name endings `ragbus ingest DIR` picks up (compared lower-cased)."""

MIB = 1024 * 1024


class ParseRefused(ValueError):
    """The file is at fault (encrypted, damaged, too big, not a kind read, mislabelled, no
    text): the message is one sentence for the person who sent it. Trying again is useless."""


class ParserFailed(RuntimeError):
    """The parser is at fault: it ran past its time, out of memory, or crashed, or a program
    it needs is missing; the message says which. The file may be fine."""


class OutOfMemory(ParserFailed):
    """The parser ran out of memory: its process is best replaced."""


@dataclass(frozen=True)
class ParseLimits:
    """What one parse may take. `ParserPool` enforces time and memory on its child process;
    `parse_bytes` enforces the rest (and the OCR's time) wherever it runs."""

    timeout_s: float = 120.0
    """Wall-clock time for one file, OCR included."""
    memory_bytes: int = 1536 * MIB
    """The parser process's address space (RLIMIT_AS), OCR programs included, each alone."""
    max_pages: int = 2000
    """Pages (slides, image frames) one file may have; a file with more is refused unread."""
    max_unpacked_bytes: int = 200 * MIB
    """A Word or PowerPoint file's members, unpacked, all together (zip bombs)."""
    max_pixels: int = 60_000_000
    """One image's pixels (Pillow's decompression-bomb bound), and a rendered page's."""
    ocr_dpi: int = 200
    """Resolution scanned PDF pages are rendered at for OCR. 200 reads 7 pt text as well as
    300 does with tesseract's LSTM model, and takes two thirds of the time."""
    max_file_bytes: int = MAX_FILE_BYTES
    ocr_workers: int = 2
    """OCR programs run at once (each on one thread); pages are rendered meanwhile."""
    max_chars: int = MAX_DOCUMENT_CHARS
    """A document's text, at most (`contracts.ingest.MAX_DOCUMENT_CHARS`)."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_pages <= MAX_PAGES:
            raise ValueError(f"max_pages must be between 1 and {MAX_PAGES:,}")
        if self.timeout_s <= 0 or self.memory_bytes <= 0 or self.ocr_workers < 1:
            raise ValueError("timeout_s, memory_bytes and ocr_workers must be positive")
        if not 50 <= self.ocr_dpi <= 600:
            raise ValueError("ocr_dpi must be between 50 and 600")


@dataclass(frozen=True)
class ParsedDocument:
    """A file made into text. `pages` is empty for kinds without pages (HTML, Markdown, text,
    Word); otherwise every page has a span, an empty one too (its start is the next one's)."""

    title: str
    text: str
    pages: list[PageSpan]
    media_type: str
    ocr_pages: int = 0
    """Pages (or images) whose text was read by OCR."""
    properties: dict[str, Any] = field(default_factory=dict)
    """What the file says about itself, clean and bounded (`infra.documents.properties`):
    its `type`, and where it states them its `title`, `author`, `created` and `modified`
    (RFC 3339 UTC), and its `pages`. Plain values: it crosses `ParserPool`'s pipe pickled."""


def display_name(filename: str) -> str:
    """The name a person knows the file by, in messages: its last path component."""
    name = PurePath(filename.replace("\\", "/")).name
    return name or "the file"


def stem(filename: str) -> str:
    return PurePath(display_name(filename)).stem.strip() or display_name(filename)


def suffix(filename: str) -> str:
    return PurePath(display_name(filename)).suffix.lower()


class Deadline:
    """The time one parse has left (`ParseLimits.timeout_s` from its start)."""

    def __init__(self, filename: str, timeout_s: float) -> None:
        self.filename = filename
        self.timeout_s = timeout_s
        self.at = time.monotonic() + timeout_s

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def check(self) -> None:
        if self.remaining() <= 0:
            raise self.overrun()

    def overrun(self) -> ParserFailed:
        return ParserFailed(ran_past(self.timeout_s, self.filename))


def ran_past(timeout_s: float, filename: str) -> str:
    return f"the parser ran past {timeout_s:g} s on {display_name(filename)}; it was stopped"
