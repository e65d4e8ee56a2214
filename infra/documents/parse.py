"""`parse_bytes`: a file's bytes made into a `ParsedDocument` in this process, by the parser
for the kind `sniff` finds. (`ParserPool` runs this in a child process, under its limits.)"""

from __future__ import annotations

from infra.documents.model import (
    DOCX,
    HTML,
    IMAGES,
    MARKDOWN,
    PDF,
    PPTX,
    TEXT,
    Deadline,
    OutOfMemory,
    ParsedDocument,
    ParseLimits,
    ParseRefused,
    ParserFailed,
    display_name,
)
from infra.documents.sniff import sniff


def parse_bytes(data: bytes, filename: str, limits: ParseLimits | None = None) -> ParsedDocument:
    """The file's text, title and pages. `ParseRefused` when the file is at fault (with the
    reason, one sentence; a reader library's unexpected error on the file counts as one);
    `ParserFailed` when the parser ran past `limits.timeout_s` (checked between pages, and
    OCR is stopped; a parse in this process is not otherwise interrupted), out of memory, or
    needs a library or a program that is missing (an `ImportError` is the server's fault,
    never the file's: `infra.documents.readers`). Nothing else is raised.

    PDFium is not thread-safe: in one process, parse one PDF at a time (`ParserPool` does)."""
    limits = limits or ParseLimits()
    if len(data) > limits.max_file_bytes:
        raise ParseRefused(
            f"{display_name(filename)} is {_size(len(data))}; at most "
            f"{_size(limits.max_file_bytes)} are read"
        )
    deadline = Deadline(filename, limits.timeout_s)
    media_type = "file"
    try:
        media_type = sniff(data, filename)
        return _parse(data, filename, media_type, limits, deadline)
    except (ParseRefused, ParserFailed):
        raise
    except MemoryError as exc:
        raise OutOfMemory(f"the parser ran out of memory on {display_name(filename)}") from exc
    except ImportError as exc:  # the install is broken, not the file
        from infra.documents.readers import missing_library

        kind = _READERS.get(media_type, "file")
        raise ParserFailed(
            f"the {kind} reader cannot load on this server, so {display_name(filename)} was "
            f"not read: {missing_library(exc)}"
        ) from exc
    except Exception as exc:  # a reader library's own error on a file it cannot make sense of
        reader = _READERS.get(media_type)
        where = f" in the {reader} reader" if reader else ""
        raise ParseRefused(
            f"{display_name(filename)} is damaged or malformed; ragbus cannot read it "
            f"({type(exc).__name__}{where})"
        ) from exc


_READERS = {
    PDF: "PDF",
    DOCX: "Word",
    PPTX: "PowerPoint",
    HTML: "HTML",
    MARKDOWN: "text",
    TEXT: "text",
    **dict.fromkeys(IMAGES, "image"),
}


def _parse(
    data: bytes, filename: str, media_type: str, limits: ParseLimits, deadline: Deadline
) -> ParsedDocument:
    if media_type == PDF:
        from infra.documents.pdf import parse_pdf

        return parse_pdf(data, filename, limits, deadline)
    if media_type in IMAGES:
        from infra.documents.ocr import parse_image

        return parse_image(data, filename, media_type, limits, deadline)
    if media_type == DOCX:
        from infra.documents.office import parse_docx

        return parse_docx(data, filename, limits)
    if media_type == PPTX:
        from infra.documents.office import parse_pptx

        return parse_pptx(data, filename, limits)
    if media_type == HTML:
        from infra.documents.html import parse_html

        return parse_html(data, filename, limits)
    if media_type in (MARKDOWN, TEXT):
        from infra.documents.text import parse_text

        return parse_text(data, filename, media_type, limits)
    raise ParseRefused(f"{display_name(filename)} is not a kind ragbus reads ({media_type})")


def _size(count: int) -> str:
    return f"{count / 2**20:,.1f} MiB" if count >= 2**20 else f"{count:,} bytes"
