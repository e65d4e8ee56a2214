"""What a file is, from its bytes: magic numbers, a zip's members, markup, UTF-8 text.

The name does not decide the kind, but it must not contradict it: a file named with one of
`SUPPORTED_SUFFIXES` whose bytes are another kind is refused ("report.pdf is named .pdf but
holds HTML"), because such a file is usually an error page or a download gone wrong. PNG,
JPEG and TIFF count as one kind here (an image is read the same way whatever its format), and
so do Markdown and text. A name without a supported suffix is sniffed freely.
"""

from __future__ import annotations

import io
import re
from typing import BinaryIO

from infra.documents.model import (
    DOCX,
    HTML,
    IMAGES,
    JPEG,
    MARKDOWN,
    PDF,
    PNG,
    PPTX,
    TEXT,
    TIFF,
    ParseLimits,
    ParseRefused,
    display_name,
    suffix,
)
from infra.documents.zipdir import ReadAt, zip_entries

_KIND_OF_SUFFIX = {
    ".pdf": "pdf",
    ".png": "image",
    ".jpg": "image",
    ".jpeg": "image",
    ".tif": "image",
    ".tiff": "image",
    ".docx": "docx",
    ".pptx": "pptx",
    ".html": "html",
    ".htm": "html",
    ".md": "text",
    ".markdown": "text",
    ".txt": "text",
}
_KIND_OF_TYPE = {
    PDF: "pdf",
    PNG: "image",
    JPEG: "image",
    TIFF: "image",
    DOCX: "docx",
    PPTX: "pptx",
    HTML: "html",
    MARKDOWN: "text",
    TEXT: "text",
}
_PHRASE = {
    PDF: "a PDF",
    PNG: "a PNG image",
    JPEG: "a JPEG image",
    TIFF: "a TIFF image",
    DOCX: "a Word document (.docx)",
    PPTX: "a PowerPoint presentation (.pptx)",
    HTML: "HTML",
    MARKDOWN: "text",
    TEXT: "text",
}
_STRONG_OPENING = re.compile(rb"<(?:!doctype\s+html|html|head|body)\b", re.I)
"""A page's first tag, after any XML declaration and comments (`_strong_html`)."""
_SPACE = b" \t\n\r\f\v"
_MARKUP_TAGS = re.compile(
    rb"<(?:div|p|span|a\s+href|table|meta|title|script|style|link|br|h[1-6]|ul|li|section|"
    rb"article|nav|header|footer|main|img)\b",
    re.I,
)
_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_OLE2_SEARCHED = 4 * 1024 * 1024
"""How far into an old Office file its encryption marker is looked for."""
_SAMPLE = 64 * 1024
BOMB_RATIO = 100
BOMB_MEMBER_BYTES = 10 * 1024 * 1024


def sniff(data: bytes, filename: str) -> str:
    """The media type the bytes say; `ParseRefused` for a kind ragbus does not read, an
    empty file, or a name whose supported suffix contradicts the bytes. Linear in the bytes
    it reads, which are the first 64 KiB and, for a zip, its table of contents."""
    return _sniff(lambda offset, size: data[offset : offset + size], len(data), filename)


def sniff_file(file: BinaryIO, filename: str) -> str:
    """`sniff` of a seekable binary file (an upload spooled to disk), reading only the parts
    `sniff` looks at: the file is never read whole into memory."""

    def read_at(offset: int, size: int) -> bytes:
        file.seek(offset)
        return file.read(size)

    size = file.seek(0, io.SEEK_END)
    try:
        return _sniff(read_at, size, filename)
    finally:
        file.seek(0)


def _sniff(read_at: ReadAt, size: int, filename: str) -> str:
    name = display_name(filename)
    if not size:
        raise ParseRefused(f"{name} is empty")
    media_type = _kind(read_at, size, filename)
    claimed = _KIND_OF_SUFFIX.get(suffix(filename))
    if claimed is not None and claimed != _KIND_OF_TYPE[media_type]:
        if claimed == "html" and media_type in (TEXT, MARKDOWN):
            return HTML  # a fragment of a page, or a page with no markup at all
        raise ParseRefused(f"{name} is named {suffix(filename)} but holds {_PHRASE[media_type]}")
    if media_type in (TEXT, MARKDOWN):
        return MARKDOWN if suffix(filename) in (".md", ".markdown") else TEXT
    return media_type


def _kind(read_at: ReadAt, size: int, filename: str) -> str:
    name = display_name(filename)
    sample = read_at(0, _SAMPLE)
    head = sample[:16]
    stripped = sample[:1024].lstrip(b"\xef\xbb\xbf \t\r\n\f")
    if stripped.startswith(b"%PDF-"):
        return PDF
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return PNG
    if head.startswith(b"\xff\xd8\xff"):
        return JPEG
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return TIFF
    if head.startswith(b"PK\x03\x04"):
        return _zip_kind(read_at, size, filename)
    if head.startswith(b"PK\x05\x06"):
        raise ParseRefused(f"{name} is an empty zip archive")
    if head.startswith(_OLE2):
        if "EncryptedPackage".encode("utf-16-le") in read_at(0, _OLE2_SEARCHED):
            raise ParseRefused(f"{name} is encrypted (password-protected); ragbus cannot read it")
        raise ParseRefused(
            f"{name} is not a kind ragbus reads (an old binary Office file: save it as .docx "
            "or .pptx)"
        )
    text = _as_text(sample, cut=size > _SAMPLE)
    if text is not None:
        if _is_html(text, strong_only=_KIND_OF_SUFFIX.get(suffix(filename)) == "text"):
            return HTML
        return TEXT
    if b"%PDF-" in sample[:1024]:
        return PDF  # a PDF after a few bytes of junk, which PDF readers accept
    raise ParseRefused(
        f"{name} is not a kind ragbus reads (binary data, none of PDF, PNG, JPEG, TIFF, "
        "Word .docx, PowerPoint .pptx, HTML, Markdown or text)"
    )


def _as_text(sample: bytes, cut: bool) -> bytes | None:
    """The file's first bytes (`sample`, `cut` from a longer file) as UTF-8, if they are
    text (a UTF-16 text's BOM counts)."""
    if sample.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            decoded = sample[: len(sample) // 2 * 2].decode("utf-16")
        except UnicodeDecodeError:
            return None
        return decoded.encode("utf-8") if _mostly_printable(decoded) else None
    decoded = sample.decode("utf-8", errors="replace")
    if cut:
        decoded = decoded[:-4]  # a character the sample cut in two
    bad = decoded.count("\ufffd") - sample.decode("utf-8", errors="ignore").count("\ufffd")
    if bad > max(2, len(decoded) // 100):
        return None
    return sample if _mostly_printable(decoded) else None


def _mostly_printable(text: str) -> bool:
    controls = sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r\f\x1b")
    return controls <= max(2, len(text) // 100)


def _is_html(sample: bytes, strong_only: bool) -> bool:
    start = sample.lstrip(b"\xef\xbb\xbf \t\r\n\f")
    if _strong_html(start):
        return True
    if strong_only or not start.startswith(b"<"):
        return False
    if len(_MARKUP_TAGS.findall(start[:8192])) >= 3:
        return True
    return b"</" in start[:2048] and _MARKUP_TAGS.match(start) is not None


def _strong_html(start: bytes) -> bool:
    """Whether the bytes open as a page does: an optional XML declaration, any comments, then
    `<!doctype html>`, `<html>`, `<head>` or `<body>`. One pass with `find`, linear in the
    bytes: a regular expression of repeated lazy comments backtracked exponentially, and
    283 bytes of `<!---->` would have held the API for days."""
    at = 0
    if start[:5].lower() == b"<?xml":
        at = start.find(b">", 5) + 1
        if at == 0:
            return False
    while True:
        while at < len(start) and start[at] in _SPACE:
            at += 1
        if not start.startswith(b"<!--", at):
            break
        at = start.find(b"-->", at + 4) + 3
        if at == 2:  # a comment that never ends
            return False
    return _STRONG_OPENING.match(start, at) is not None


def _zip_kind(read_at: ReadAt, size: int, filename: str) -> str:
    name = display_name(filename)
    members = {entry.name for entry in zip_entries(read_at, size, filename)}
    if "word/document.xml" in members:
        return DOCX
    if "ppt/presentation.xml" in members:
        return PPTX
    if "xl/workbook.xml" in members:
        why = "an Excel workbook"
    elif "content.xml" in members and "mimetype" in members:
        why = "an OpenDocument file: save it as .docx or .pptx"
    else:
        why = "a zip archive that is neither a Word .docx nor a PowerPoint .pptx file"
    raise ParseRefused(f"{name} is not a kind ragbus reads ({why})")


def check_zip(data: bytes, filename: str, limits: ParseLimits) -> None:
    """Refuse a zip bomb before any member is unpacked: a table of contents over its bounds
    (`infra.documents.zipdir`), members that would unpack to more than `max_unpacked_bytes`
    together, or a big member packed more than 100:1."""
    name = display_name(filename)
    entries = zip_entries(lambda offset, size: data[offset : offset + size], len(data), filename)
    total = sum(entry.unpacked for entry in entries)
    bomb = f"{name} looks like a zip bomb"
    if total > limits.max_unpacked_bytes:
        raise ParseRefused(
            f"{bomb}: it would unpack to {total / 2**20:,.0f} MiB, more than the "
            f"{limits.max_unpacked_bytes / 2**20:,.0f} MiB read"
        )
    for entry in entries:
        ratio = entry.unpacked / max(entry.packed, 1)
        if entry.unpacked > BOMB_MEMBER_BYTES and ratio > BOMB_RATIO:
            raise ParseRefused(
                f"{bomb}: {entry.name} unpacks {ratio:,.0f} times larger than it is packed"
            )


def is_image(media_type: str) -> bool:
    return media_type in IMAGES
