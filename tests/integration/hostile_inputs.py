"""Files made to hurt a RAG server, each with what must become of it (issue 54), for the
hostile-files suite (`test_hostile_files.py`): built here, small on the wire, as an attacker
would build them.

`REFUSED_AT_UPLOAD`: refused by the API before anything is queued, with an HTTP status and a
reason. `FAILED_IN_JOB`: accepted (their kind is one ragbus reads, their bytes within every
upload limit), then failed by the parser in their job, with a reason (or, for an input whose
attack was on the time it takes to read, indexed); good files of the same batch are indexed
beside them.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from infra.documents.zipdir import MAX_DIRECTORY_BYTES, MAX_MEMBERS
from tests.unit.test_documents_support import zip_of_entries

MIB = 1024 * 1024


@dataclass(frozen=True)
class Hostile:
    kind: str
    name: str
    make: Callable[[], bytes]
    reason: str | None
    """What the refusal or the job's error for the file says (a part of it); None: the
    file is harmless once read right, and is indexed (its attack was on the time taken)."""
    status: int | None = None
    """The HTTP status it is refused with at upload; None: accepted, failed in its job."""


def _docx(text: str = "A plain page.") -> bytes:
    import docx

    document = docx.Document()
    document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _rewrite_docx(change: Callable[[bytes], bytes]) -> bytes:
    """A real Word file whose `word/document.xml` is rewritten by `change`."""
    source = zipfile.ZipFile(io.BytesIO(_docx("x")))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename == "word/document.xml":
                data = change(data)
            archive.writestr(info, data)
    return out.getvalue()


def redos_page() -> bytes:
    """Empty comments before junk: 40 of them ran the old sniffing pattern for days."""
    return b"<!---->" * 40 + b"x"


def ratio_bomb() -> bytes:
    """A Word file whose document unpacks to 300 MiB of zeros from about 300 KB."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive,
        archive.open("word/document.xml", "w", force_zip64=True) as stream,
    ):
        chunk = bytes(MIB)
        for _ in range(300):
            stream.write(chunk)
    return out.getvalue()


def many_members() -> bytes:
    """120,000 empty entries in about 10 MB: over half a second and 60 MB to open with
    `zipfile` (its end record can say no more than 65,535)."""
    return zip_of_entries(120_000)


def lying_count() -> bytes:
    return zip_of_entries(MAX_MEMBERS + 100, claimed=3)


def huge_directory() -> bytes:
    return zip_of_entries(3, directory_size=MAX_DIRECTORY_BYTES + 1)


def deep_xml() -> bytes:
    """A Word file whose body nests 5,000 content controls deep."""

    def nest(xml: bytes) -> bytes:
        depth = 5_000
        inner = b"<w:p><w:r><w:t>deep</w:t></w:r></w:p>"
        nested = b"<w:sdt><w:sdtContent>" * depth + inner + b"</w:sdtContent></w:sdt>" * depth
        return xml.replace(b"<w:body>", b"<w:body>" + nested)

    return _rewrite_docx(nest)


def laughing_xml() -> bytes:
    """A Word file whose text is a billion laughs: entities ten deep, ten wide."""

    def laugh(xml: bytes) -> bytes:
        entities = '<!ENTITY a0 "lol">' + "".join(
            f'<!ENTITY a{i} "{f"&a{i - 1};" * 10}">' for i in range(1, 10)
        )
        head, rest = xml.split(b"?>", 1)
        doctype = b"<!DOCTYPE w:document [" + entities.encode() + b"]>"
        return head + b"?>" + doctype + rest.replace(b"<w:t>x</w:t>", b"<w:t>&a9;</w:t>")

    return _rewrite_docx(laugh)


def _pdf(pages: list[tuple[float, float]], text: str = "") -> bytes:
    import pypdfium2

    pdf = pypdfium2.PdfDocument.new()
    for width, height in pages:
        pdf.new_page(width, height)
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


def many_pages(count: int) -> Callable[[], bytes]:
    return lambda: _pdf([(612, 792)] * count)


def _scan_on(width: float, height: float) -> bytes:
    """A page that needs OCR (an image, no text layer) with the given MediaBox."""
    import pypdfium2
    from PIL import Image

    pdf = pypdfium2.PdfDocument.new()
    page = pdf.new_page(612, 792)
    image = pypdfium2.PdfImage.new(pdf)
    image.set_bitmap(pypdfium2.PdfBitmap.from_pil(Image.new("L", (64, 64), 255)))
    image.set_matrix(pypdfium2.PdfMatrix().scale(300, 300).translate(100, 100))
    page.insert_obj(image)
    page.gen_content()
    page.set_mediabox(0, 0, width, height)
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


def huge_page() -> bytes:
    """A scanned page 1,440,000 points a side: 4 x 10^8 pixels at the old 1 dpi floor."""
    return _scan_on(1_440_000, 1_440_000)


def tiny_images() -> bytes:
    """One page of 2,000 one-pixel images."""
    import pypdfium2
    from PIL import Image

    pdf = pypdfium2.PdfDocument.new()
    page = pdf.new_page(600, 800)
    dot = Image.new("L", (1, 1), 0)
    for index in range(2_000):
        image = pypdfium2.PdfImage.new(pdf)
        image.set_bitmap(pypdfium2.PdfBitmap.from_pil(dot))
        image.set_matrix(pypdfium2.PdfMatrix().translate(index % 600, (index // 600) * 2))
        page.insert_obj(image)
    page.gen_content()
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


def image_bomb() -> bytes:
    """A PNG that says it is 40,000 x 40,000 pixels, in 8 KB."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    width = height = 40_000
    packer = zlib.compressobj(9)
    rows = b"".join(packer.compress(b"\x00" * (width + 1)) for _ in range(200)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")
    )


def polyglot() -> bytes:
    """A PDF header in front of a zip (a Word file): read as a PDF, which it is not."""
    return b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n" + _docx("hidden in a zip")


def html_named_pdf() -> bytes:
    return b"<!doctype html><html><body><p>an error page</p></body></html>"


def text_named_docx() -> bytes:
    return b"Just some words, named as a Word file."


MAX_PAGES = 40
"""The suite's RAGBUS_MAX_PAGES."""

REFUSED_AT_UPLOAD = [
    Hostile("zip: member count", "members.docx", many_members, "holds 65,535 files", 415),
    Hostile("zip: a count that lies", "liar.docx", lying_count, "holds more than 20,000", 415),
    Hostile("zip: central directory", "toc.docx", huge_directory, "table of contents", 415),
    Hostile("wrong suffix", "report.pdf", html_named_pdf, "named .pdf but holds HTML", 415),
    Hostile("wrong suffix", "letter.docx", text_named_docx, "named .docx but holds text", 415),
]
FAILED_IN_JOB = [
    Hostile("catastrophic regex input", "comments.html", redos_page, None),
    Hostile("zip bomb: ratio", "invoice.docx", ratio_bomb, "zip bomb"),
    Hostile("deep XML", "deep.docx", deep_xml, "damaged Word file"),
    Hostile("XML entities (billion laughs)", "laughs.docx", laughing_xml, "damaged Word file"),
    Hostile("many pages", "thick.pdf", many_pages(MAX_PAGES + 1), f"at most {MAX_PAGES} are read"),
    Hostile("huge page", "poster.pdf", huge_page, "too large to read by OCR"),
    Hostile("thousands of tiny images", "dots.pdf", tiny_images, "no text"),
    Hostile("image bomb", "bomb.png", image_bomb, "decompression bomb"),
    Hostile("polyglot", "polyglot.pdf", polyglot, "damaged or truncated PDF"),
]
