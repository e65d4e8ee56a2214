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
import zipfile

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
_STRONG_HTML = re.compile(
    rb"^(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b", re.I | re.S
)
_MARKUP_TAGS = re.compile(
    rb"<(?:div|p|span|a\s+href|table|meta|title|script|style|link|br|h[1-6]|ul|li|section|"
    rb"article|nav|header|footer|main|img)\b",
    re.I,
)
_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_SAMPLE = 64 * 1024
BOMB_RATIO = 100
BOMB_MEMBER_BYTES = 10 * 1024 * 1024
MAX_MEMBERS = 20_000


def sniff(data: bytes, filename: str) -> str:
    """The media type the bytes say; `ParseRefused` for a kind ragbus does not read, an
    empty file, or a name whose supported suffix contradicts the bytes."""
    name = display_name(filename)
    if not data:
        raise ParseRefused(f"{name} is empty")
    media_type = _kind(data, filename)
    claimed = _KIND_OF_SUFFIX.get(suffix(filename))
    if claimed is not None and claimed != _KIND_OF_TYPE[media_type]:
        if claimed == "html" and media_type in (TEXT, MARKDOWN):
            return HTML  # a fragment of a page, or a page with no markup at all
        raise ParseRefused(f"{name} is named {suffix(filename)} but holds {_PHRASE[media_type]}")
    if media_type in (TEXT, MARKDOWN):
        return MARKDOWN if suffix(filename) in (".md", ".markdown") else TEXT
    return media_type


def _kind(data: bytes, filename: str) -> str:
    name = display_name(filename)
    head = data[:16]
    stripped = data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n\f")
    if stripped.startswith(b"%PDF-"):
        return PDF
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return PNG
    if head.startswith(b"\xff\xd8\xff"):
        return JPEG
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return TIFF
    if head.startswith(b"PK\x03\x04"):
        return _zip_kind(data, filename)
    if head.startswith(b"PK\x05\x06"):
        raise ParseRefused(f"{name} is an empty zip archive")
    if head.startswith(_OLE2):
        if "EncryptedPackage".encode("utf-16-le") in data[: 4 * 1024 * 1024]:
            raise ParseRefused(f"{name} is encrypted (password-protected); ragbus cannot read it")
        raise ParseRefused(
            f"{name} is not a kind ragbus reads (an old binary Office file: save it as .docx "
            "or .pptx)"
        )
    text = _as_text(data)
    if text is not None:
        if _is_html(text, strong_only=_KIND_OF_SUFFIX.get(suffix(filename)) == "text"):
            return HTML
        return TEXT
    if b"%PDF-" in data[:1024]:
        return PDF  # a PDF after a few bytes of junk, which PDF readers accept
    raise ParseRefused(
        f"{name} is not a kind ragbus reads (binary data, none of PDF, PNG, JPEG, TIFF, "
        "Word .docx, PowerPoint .pptx, HTML, Markdown or text)"
    )


def _as_text(data: bytes) -> bytes | None:
    """The start of the bytes as UTF-8, if they are text (a UTF-16 text's BOM counts)."""
    sample = data[:_SAMPLE]
    if sample.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            decoded = sample[: len(sample) // 2 * 2].decode("utf-16")
        except UnicodeDecodeError:
            return None
        return decoded.encode("utf-8") if _mostly_printable(decoded) else None
    decoded = sample.decode("utf-8", errors="replace")
    if len(data) > _SAMPLE:
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
    if _STRONG_HTML.match(start):
        return True
    if strong_only or not start.startswith(b"<"):
        return False
    if len(_MARKUP_TAGS.findall(start[:8192])) >= 3:
        return True
    return b"</" in start[:2048] and _MARKUP_TAGS.match(start) is not None


def _zip_members(data: bytes, filename: str) -> list[zipfile.ZipInfo]:
    """The members of a zip archive; `ParseRefused` for one that cannot be read as one."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return archive.infolist()
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        OSError,
        ValueError,
        EOFError,
        NotImplementedError,
    ) as exc:
        name = display_name(filename)
        raise ParseRefused(f"{name} is a damaged zip archive; ragbus cannot read it") from exc


def _zip_kind(data: bytes, filename: str) -> str:
    name = display_name(filename)
    members = {info.filename for info in _zip_members(data, filename)}
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
    """Refuse a zip bomb before any member is unpacked: members that would unpack to more
    than `max_unpacked_bytes` together, a big member packed more than 100:1, or too many."""
    name = display_name(filename)
    infos = _zip_members(data, filename)
    total = sum(info.file_size for info in infos)
    bomb = f"{name} looks like a zip bomb"
    if len(infos) > MAX_MEMBERS:
        raise ParseRefused(f"{bomb}: it holds {len(infos):,} files")
    if total > limits.max_unpacked_bytes:
        raise ParseRefused(
            f"{bomb}: it would unpack to {total / 2**20:,.0f} MiB, more than the "
            f"{limits.max_unpacked_bytes / 2**20:,.0f} MiB read"
        )
    for info in infos:
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > BOMB_MEMBER_BYTES and ratio > BOMB_RATIO:
            raise ParseRefused(
                f"{bomb}: {info.filename} unpacks {ratio:,.0f} times larger than it is packed"
            )


def is_image(media_type: str) -> bool:
    return media_type in IMAGES
