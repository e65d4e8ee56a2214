"""PDF with pypdfium2 (PDFium, Chrome's PDF engine): each page's text layer, or, for a page
with (nearly) none that shows an image, its image rendered and read by OCR.

The page count is checked before any page is read. A page is read by OCR when its text
layer holds fewer than `OCR_BELOW_LETTERS` letters and it draws an image; it is rendered at
`ParseLimits.ocr_dpi`, less where that would make more than `max_pixels` pixels (a page
too large for even `MIN_OCR_DPI` is refused). The title is
the PDF's own (its metadata), else the first heading, else the first line, else the stem.

Its properties (`infra.documents.properties`): title, author, creation and modification
dates from its document information dictionary, else from its XMP metadata (the packet that
describes the PDF itself, where it is stored uncompressed, as the XMP specification advises);
and its page count.
"""

from __future__ import annotations

import html
import math
import re
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from infra.documents.model import (
    PDF,
    Deadline,
    ParsedDocument,
    ParseLimits,
    ParseRefused,
    display_name,
)
from infra.documents.ocr import OcrRunner
from infra.documents.pdf_layout import Line, body_size, heading_levels, page_blocks, page_lines
from infra.documents.properties import file_properties, first_date, first_text
from infra.documents.text import (
    PagedText,
    blocks_text,
    check_length,
    choose_title,
    first_heading,
    first_line,
)

if TYPE_CHECKING:
    import pypdfium2

OCR_BELOW_LETTERS = 20
_ENCRYPT = re.compile(rb"/Encrypt\b")
_EMPTY_TREE = re.compile(rb"/Count\s+0\b")
_PAGE = re.compile(rb"/Type\s*/Page\b(?!s)")
_JUNK_TITLES = ("untitled", "title", "document", "microsoft word - ", "slide 1")
_INFO_KEYS = {
    "title": "Title",
    "author": "Author",
    "created": "CreationDate",
    "modified": "ModDate",
}
_XMP_START = b"<x:xmpmeta"
_XMP_END = b"</x:xmpmeta>"
MAX_XMP_BYTES = 256 * 1024
"""An XMP packet larger than this is not read."""
MAX_XMP_PACKETS = 16
"""Packets looked at (images embedded in a PDF may carry their own) before giving up."""
_PDF_SCHEMAS = (b"http://ns.adobe.com/pdf/1.3/", b"http://www.aiim.org/pdfa/ns/id/")
"""Declared in the packet of the PDF itself (its `pdf:Producer`, its PDF/A conformance), not
in an embedded image's."""
_XMP_WINDOW = 8192
"""A property is read from this many characters from its first mention in the packet (so a
packet of a thousand unclosed mentions costs no more than one)."""
_XMP_TITLE = re.compile(r"<dc:title\b[^>]*>\s*<rdf:Alt\b[^>]*>\s*<rdf:li\b[^>]*>([^<]*)</rdf:li>")
_XMP_CREATORS = re.compile(
    r"<dc:creator\b[^>]*>\s*<rdf:(?:Seq|Bag)\b[^>]*>(.*?)</rdf:(?:Seq|Bag)>", re.S
)
_XMP_ITEM = re.compile(r"<rdf:li\b[^>]*>([^<]*)</rdf:li>")
_XMP_DATES = {"created": "xmp:CreateDate", "modified": "xmp:ModifyDate"}
_XMP_DATE = re.compile(r"xmp:\w+(?:>([^<]*)<|\s*=\s*\"([^\"<]*)\")")


def _open(data: bytes, filename: str) -> pypdfium2.PdfDocument:
    import pypdfium2
    import pypdfium2.raw as pdfium_c

    name = display_name(filename)
    try:
        return pypdfium2.PdfDocument(data)
    except pypdfium2.PdfiumError as exc:
        # PDFium's error code is process-wide and not reset: a failure that sets none (a PDF
        # without pages) reports the previous one's. So the bytes must agree with the code.
        code = getattr(exc, "err_code", None)
        encrypted = _ENCRYPT.search(data) is not None
        if code == pdfium_c.FPDF_ERR_PASSWORD and encrypted:
            raise ParseRefused(
                f"{name} is encrypted (password-protected); ragbus cannot read it"
            ) from exc
        if code == pdfium_c.FPDF_ERR_SECURITY and encrypted:
            raise ParseRefused(
                f"{name} is encrypted with a scheme ragbus cannot read (unsupported security "
                "handler)"
            ) from exc
        if _EMPTY_TREE.search(data) and not _PAGE.search(data) and b"/ObjStm" not in data:
            raise ParseRefused(f"{name} has no pages") from exc
        raise ParseRefused(f"{name} is a damaged or truncated PDF; ragbus cannot read it") from exc


def page_count(pdf: pypdfium2.PdfDocument, filename: str, limits: ParseLimits) -> int:
    """The number of pages, refused when zero or over the limit (no page is read)."""
    name = display_name(filename)
    pages = len(pdf)
    if pages <= 0:
        raise ParseRefused(f"{name} has no pages")
    if pages > limits.max_pages:
        raise ParseRefused(
            f"{name} has {pages:,} pages; at most {limits.max_pages:,} are read (RAGBUS_MAX_PAGES)"
        )
    return pages


def _has_image(page: pypdfium2.PdfPage) -> bool:
    import pypdfium2.raw as pdfium_c

    for _ in page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_IMAGE,), max_depth=8):
        return True
    return False


def _metadata_title(pdf: pypdfium2.PdfDocument) -> str:
    try:
        title = str(pdf.get_metadata_value("Title") or "").strip()
    except Exception:  # a damaged info dictionary is no reason to refuse the file
        return ""
    lowered = title.lower()
    if any(lowered == junk or lowered.startswith(junk) for junk in _JUNK_TITLES):
        return ""
    if lowered.endswith((".doc", ".docx", ".pdf", ".tex", ".dvi", ".indd", ".ppt", ".pptx")):
        return ""
    return title


def _stated(pdf: pypdfium2.PdfDocument, data: bytes) -> dict[str, Any]:
    """What the PDF says about itself: its information dictionary, gaps filled from XMP."""
    info: dict[str, str] = {}
    for key, name in _INFO_KEYS.items():
        try:
            info[key] = str(pdf.get_metadata_value(name) or "")
        except Exception:  # one damaged entry, not the others
            continue
    stated = {
        "title": first_text(info.get("title")),
        "author": first_text(info.get("author")),
        "created": first_date(info.get("created")),
        "modified": first_date(info.get("modified")),
    }
    if not all(stated.values()):
        xmp = xmp_properties(data)
        stated["title"] = stated["title"] or first_text(xmp.get("title"))
        stated["author"] = stated["author"] or first_text(xmp.get("author"))
        stated["created"] = stated["created"] or first_date(xmp.get("created"))
        stated["modified"] = stated["modified"] or first_date(xmp.get("modified"))
    return stated


def xmp_properties(data: bytes) -> dict[str, str]:
    """Title, author (creators joined by ", "), created and modified, raw, from the XMP
    packet of the PDF itself, where one is stored uncompressed; empty where there is none."""
    at = 0
    for _ in range(MAX_XMP_PACKETS):
        start = data.find(_XMP_START, at)
        if start < 0:
            return {}
        end = data.find(_XMP_END, start, start + MAX_XMP_BYTES)
        if end < 0:
            at = start + len(_XMP_START)
            continue
        at = end + len(_XMP_END)
        packet = data[start:end]
        if any(schema in packet for schema in _PDF_SCHEMAS):
            return _xmp_fields(packet.decode("utf-8", errors="replace"))
    return {}


def _xmp_fields(packet: str) -> dict[str, str]:
    found: dict[str, str] = {}
    title = _XMP_TITLE.match(_window(packet, "<dc:title"))
    if title:
        found["title"] = html.unescape(title[1])
    creators = _XMP_CREATORS.match(_window(packet, "<dc:creator"))
    if creators:
        names = [html.unescape(name).strip() for name in _XMP_ITEM.findall(creators[1])]
        found["author"] = ", ".join(name for name in names if name)
    for key, name in _XMP_DATES.items():
        date = _XMP_DATE.match(_window(packet, name))
        if date:
            found[key] = html.unescape(date[1] or date[2] or "")
    return found


def _window(packet: str, mention: str) -> str:
    at = packet.find(mention)
    return packet[at : at + _XMP_WINDOW] if at >= 0 else ""


MIN_OCR_DPI = 50
"""Below this a scanned page's text is too small for OCR to read: a page too large to render
at it within `max_pixels` is refused, not rendered at a resolution that reads nothing."""


def _render(
    page: pypdfium2.PdfPage, index: int, filename: str, limits: ParseLimits
) -> tuple[Any, int]:
    """The page as a grey image at `ocr_dpi`, less for a large page (never more than
    `max_pixels` pixels), and the dpi used; `ParseRefused` for a page so large that even
    `MIN_OCR_DPI` would exceed the pixels (a MediaBox of 1,440,000 points rendered at the
    old 1 dpi floor made 4 x 10^8 pixels, 6.7 times the cap)."""
    width, height = page.get_size()
    dpi = float(limits.ocr_dpi)
    area = max(width * height, 1.0) / (72.0 * 72.0)  # square inches
    if area * dpi * dpi > limits.max_pixels:
        dpi = math.sqrt(limits.max_pixels / area)
        if dpi < MIN_OCR_DPI:
            raise ParseRefused(
                f"{display_name(filename)}: page {index + 1} is {width / 72:,.0f} x "
                f"{height / 72:,.0f} inches, too large to read by OCR (at {MIN_OCR_DPI} dpi it "
                f"would be more than {limits.max_pixels:,} pixels)"
            )
    bitmap = page.render(scale=dpi / 72.0, grayscale=True)
    return bitmap.to_pil(), round(dpi)


def parse_pdf(
    data: bytes, filename: str, limits: ParseLimits, deadline: Deadline
) -> ParsedDocument:
    name = display_name(filename)
    pdf = _open(data, filename)
    ocr: OcrRunner | None = None
    try:
        count = page_count(pdf, filename, limits)
        layers: list[list[Line]] = []
        scans: dict[int, Future[str]] = {}
        chars = 0
        for index in range(count):
            deadline.check()
            lines, scan = read_page(pdf, index, limits, filename)
            layers.append(lines)
            chars += sum(len(line.text) + 1 for line in lines)
            check_length(chars, limits, filename)
            if scan is not None:
                image, dpi = scan
                if ocr is None:
                    ocr = OcrRunner(filename, limits, deadline)
                scans[index] = ocr.submit(image, index + 1, dpi)
        body = body_size(layers)
        levels = heading_levels(layers, body)
        paged = PagedText(limits, filename)
        for index, lines in enumerate(layers):
            blocks = page_blocks(lines, body, levels)
            if index in scans and ocr is not None:
                blocks.append(ocr.wait(scans[index]))
            paged.add(blocks_text(blocks))
        text, pages = paged.finish()
        if not text.strip():
            raise ParseRefused(
                f"{name} holds no text"
                + (" that OCR could read" if scans else " (its pages have no text layer)")
            )
        title = choose_title(filename, _metadata_title(pdf), first_heading(text), first_line(text))
        return ParsedDocument(
            title=title,
            text=text,
            pages=pages,
            media_type=PDF,
            ocr_pages=len(scans),
            properties=file_properties(PDF, lambda: _stated(pdf, data), pages=count),
        )
    finally:
        if ocr is not None:
            ocr.close()
        pdf.close()


def read_page(
    pdf: pypdfium2.PdfDocument, index: int, limits: ParseLimits, filename: str = ""
) -> tuple[list[Line], tuple[Any, int] | None]:
    """One page's text layer as lines; and, where it needs OCR, its image and the dpi."""
    import pypdfium2

    try:
        page = pdf[index]
    except pypdfium2.PdfiumError:
        return [], None  # a page PDFium cannot load reads as empty
    try:
        textpage = page.get_textpage()
        try:
            lines = page_lines(textpage, page.get_rotation() % 360)
        finally:
            textpage.close()
        if sum(line.letters for line in lines) >= OCR_BELOW_LETTERS or not _has_image(page):
            return lines, None
        return lines, _render(page, index, filename, limits)
    finally:
        page.close()
