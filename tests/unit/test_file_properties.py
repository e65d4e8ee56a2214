"""What a file says about itself (type, title, author, dates, pages), read by each reader
from real files made here, normalised (RFC 3339 UTC dates, clean bounded strings), and kept
by the parse worker as the document's metadata `file`; hostile properties dropped quietly,
never failing the file."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import time
import zipfile
from typing import Any

import pytest

from contracts import subjects as sj
from contracts.ingest import MAX_METADATA_CHARS, FileDocument, FileRef, IngestFile, check_metadata
from infra.documents import ParsedDocument, ParseLimits, ParserPool, parse_bytes
from infra.documents.pdf import xmp_properties
from infra.documents.properties import MAX_CHARS, clean_properties, file_type, rfc3339
from tests.unit.test_documents_support import (
    FONT,
    book,
    docx_file,
    image_bytes,
    pdf_objects,
    pptx_file,
    text_pdf,
)
from workers.parse import made_document

# -- normalisation ------------------------------------------------------------------------

PLUS_TWO = dt.timezone(dt.timedelta(hours=2))


@pytest.mark.parametrize(
    ("stated", "expected"),
    [
        ("D:20240501120000+02'00'", "2024-05-01T10:00:00Z"),
        ("D:20240501120000Z", "2024-05-01T12:00:00Z"),
        ("D:20240501", "2024-05-01T00:00:00Z"),
        ("20240501093000-05'30'", "2024-05-01T15:00:00Z"),
        ("2024-05-01", "2024-05-01T00:00:00Z"),
        ("2024-05-01T12:00:00+02:00", "2024-05-01T10:00:00Z"),
        ("2024-05-01T10:00:00.250Z", "2024-05-01T10:00:00Z"),
        ("2024-05-01 10:00:00 +02:00", "2024-05-01T08:00:00Z"),
        ("2024:05:01 10:00:00", "2024-05-01T10:00:00Z"),
        ("Wed, 01 May 2024 10:00:00 GMT", "2024-05-01T10:00:00Z"),
        (dt.datetime(2024, 5, 1, 10), "2024-05-01T10:00:00Z"),
        (dt.datetime(2024, 5, 1, 12, tzinfo=PLUS_TWO), "2024-05-01T10:00:00Z"),
        (dt.date(2024, 5, 1), "2024-05-01T00:00:00Z"),
        ("2024-05-01T10:00:00Z", "2024-05-01T10:00:00Z"),  # clean stays clean
        # not dates, or absurd ones
        ("not a date", None),
        ("", None),
        ("D:20241399", None),
        ("D:99991231235959Z", None),
        ("D:16010101000000Z", None),
        ("D:20240501120000+99'00'", None),
        ("0000:00:00 00:00:00", None),
        ("2024-05", None),
        ("2" * 5000, None),
        (20240501, None),
        (b"2024-05-01", None),
        (["2024-05-01"], None),
        (None, None),
    ],
)
def test_dates_become_rfc3339_utc_or_nothing(stated: Any, expected: str | None) -> None:
    assert rfc3339(stated) == expected


def test_properties_are_cleaned_bounded_and_junk_dropped() -> None:
    raw = {
        "type": "pdf",
        "title": "  Harbour\x00 \x07records\u202e\n\tof\ud800 1914 ",
        "author": "A" * 3000,
        "created": "D:20240501120000Z",
        "modified": {"$gt": "2024"},
        "pages": 12.0,
        "subject": "kept? no",
        "evil": {"nested": ["junk"] * 100},
    }
    clean = clean_properties(raw)
    assert clean == {
        "type": "pdf",
        "title": "Harbour records of 1914",
        "author": "A" * MAX_CHARS,
        "created": "2024-05-01T12:00:00Z",
        "pages": 12,
    }
    assert clean_properties(clean) == clean
    junk = {"type": "PDF!", "title": b"bytes", "author": ["x"], "pages": True, "created": 1.5}
    assert clean_properties(junk) == {}
    assert clean_properties({"pages": float("nan")}) == clean_properties({"pages": 0}) == {}
    assert clean_properties({"pages": 10**9}) == {}
    assert clean_properties("not a mapping") == {}


def test_the_type_comes_from_the_media_type() -> None:
    assert file_type("application/pdf") == "pdf"
    assert file_type("image/jpeg") == file_type("image/tiff") == "image"
    assert file_type("text/markdown") == "markdown"
    assert file_type("application/vnd.ms-excel") == "vnd.ms-excel"
    assert file_type("weird/<script>") == "file"


# -- PDF ------------------------------------------------------------------------------------

_CONTENT = b"BT /F1 24 Tf 72 720 Td (Harbour records of the northern sea) Tj ET"


def info_pdf(info: bytes = b"", xmp: bytes = b"", pages: int = 1) -> bytes:
    """A PDF of `pages` pages of text, with `info` as its document information dictionary's
    entries and `xmp` as its (uncompressed) metadata stream's bytes."""
    stream = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(_CONTENT), _CONTENT)
    metadata = b" /Metadata 6 0 R" if xmp else b""
    kids = b" ".join(b"%d 0 R" % (7 + i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R" + metadata + b" >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        stream,
        b"<< " + info + b" >>",
        b"<< /Type /Metadata /Subtype /XML /Length %d >>\nstream\n%s\nendstream" % (len(xmp), xmp),
    ]
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
    page += b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>"
    objects += [page] * pages
    data = pdf_objects(objects)
    return data.replace(b"/Root 1 0 R >>", b"/Root 1 0 R /Info 5 0 R >>")


def xmp_packet(
    title: str = "", creators: tuple[str, ...] = (), created: str = "", pdf_schema: bool = True
) -> bytes:
    schema = ' xmlns:pdf="http://ns.adobe.com/pdf/1.3/" pdf:Producer="x"' if pdf_schema else ""
    date = f' xmp:CreateDate="{created}"' if created else ""
    people = "".join(f"<rdf:li>{name}</rdf:li>" for name in creators)
    return (
        '<?xpacket begin="" id="W5M0MpCehiHzreSzNTczkc9d"?>'
        '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
        'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
        '<rdf:Description rdf:about="" xmlns:dc="http://purl.org/dc/elements/1.1/" '
        f'xmlns:xmp="http://ns.adobe.com/xap/1.0/"{schema}{date}>'
        f'<dc:title><rdf:Alt><rdf:li xml:lang="x-default">{title}</rdf:li></rdf:Alt></dc:title>'
        f"<dc:creator><rdf:Seq>{people}</rdf:Seq></dc:creator>"
        '</rdf:Description></rdf:RDF></x:xmpmeta><?xpacket end="w"?>'
    ).encode()


def test_a_pdf_says_its_title_author_dates_and_pages() -> None:
    info = (
        b"/Title (Harbour Records) /Author (Ann Lee) "
        b"/CreationDate (D:20240501120000+02'00') /ModDate (D:20240502)"
    )
    doc = parse_bytes(info_pdf(info, pages=3), "records.pdf")
    assert doc.properties == {
        "type": "pdf",
        "title": "Harbour Records",
        "author": "Ann Lee",
        "created": "2024-05-01T10:00:00Z",
        "modified": "2024-05-02T00:00:00Z",
        "pages": 3,
    }


def test_a_pdf_made_by_a_writer_says_what_it_was_given() -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_font("DejaVu", fname=str(FONT))
    pdf.set_font("DejaVu", size=12)
    pdf.set_title("Tide tables")
    pdf.set_author("Bo Chen")
    pdf.set_creation_date(dt.datetime(2024, 5, 1, 10, tzinfo=dt.UTC))
    pdf.add_page()
    pdf.multi_cell(0, 8, "The tides of the northern sea, month by month.")
    doc = parse_bytes(bytes(pdf.output()), "tides.pdf")
    assert doc.properties == {
        "type": "pdf",
        "title": "Tide tables",
        "author": "Bo Chen",
        "created": "2024-05-01T10:00:00Z",
        "pages": 1,
    }


def test_a_pdf_without_information_says_it_in_xmp() -> None:
    xmp = xmp_packet("Harbour &amp; Sea", ("Ann Lee", "Bo Chen"), "2024-05-01T12:00:00+02:00")
    doc = parse_bytes(info_pdf(b"/Producer (x)", xmp), "x.pdf")
    assert doc.properties == {
        "type": "pdf",
        "title": "Harbour & Sea",
        "author": "Ann Lee, Bo Chen",
        "created": "2024-05-01T10:00:00Z",
        "pages": 1,
    }
    # the information dictionary comes first; XMP fills its gaps
    both = parse_bytes(info_pdf(b"/Title (Info title)", xmp), "y.pdf")
    assert both.properties["title"] == "Info title"
    assert both.properties["author"] == "Ann Lee, Bo Chen"
    # an embedded image's packet (no PDF schema) is not the document's
    image_packet = xmp_packet("Photo", ("Photographer",), pdf_schema=False)
    alone = parse_bytes(info_pdf(b"", image_packet), "z.pdf")
    assert alone.properties == {"type": "pdf", "pages": 1}


def test_xmp_is_read_within_bounds() -> None:
    unclosed = b"<x:xmpmeta http://ns.adobe.com/pdf/1.3/ " + b"<dc:creator " * 200_000
    assert xmp_properties(unclosed) == {}
    schema = b"http://ns.adobe.com/pdf/1.3/"
    mentions = b'<dc:title <dc:creator xmp:CreateDate="' * 5000
    started = time.perf_counter()
    assert xmp_properties(b"<x:xmpmeta " + schema + mentions + b"</x:xmpmeta>") == {}
    assert time.perf_counter() - started < 1.0


def test_hostile_pdf_properties_are_dropped_and_the_pdf_is_read() -> None:
    info = (
        b"/Title <FEFF0007D80000480061007200620072>"  # BEL, a lone surrogate, "Harbr"
        b" /Author (" + b"A" * 5000 + b")"
        b" /CreationDate (yesterday, around noon) /ModDate (D:99991231235959Z)"
        b" /Subject << /Nested [1 2 3] >>"
    )
    doc = parse_bytes(info_pdf(info), "hostile.pdf")
    assert "Harbour records" in doc.text
    props = doc.properties
    assert props["type"] == "pdf" and props["pages"] == 1
    assert props["author"] == "A" * MAX_CHARS
    assert "created" not in props and "modified" not in props
    assert not re.search(r"[\x00-\x1f\x7f\ud800-\udfff]", props.get("title", ""))
    json.dumps(props).encode()  # and UTF-8 can carry every value
    # BEL, "Har", a direction override, "bour", NUL, tab
    controlled = info_pdf(b"/Title <FEFF0007004800610072202E0062006F0075007200000009>")
    assert parse_bytes(controlled, "c.pdf").properties["title"] == "Harbour"
    garbage = info_pdf(b"/CreationDate 42 /ModDate [(D:2024)] /Author 7 0 R /Title true")
    assert parse_bytes(garbage, "junk.pdf").properties == {"type": "pdf", "pages": 1}


# -- Word and PowerPoint --------------------------------------------------------------------


def with_core(data: bytes, kind: str, **core: Any) -> bytes:
    """An Office file made by the support helpers, its core properties set to `core`."""
    if kind == "docx":
        import docx

        package: Any = docx.Document(io.BytesIO(data))
    else:
        import pptx

        package = pptx.Presentation(io.BytesIO(data))
    for key, value in core.items():
        setattr(package.core_properties, key, value)
    out = io.BytesIO()
    package.save(out)
    return out.getvalue()


def replace_member(data: bytes, member: str, edit: Any) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            body = source.read(info.filename)
            target.writestr(info, edit(body) if info.filename == member else body)
    return out.getvalue()


def test_word_and_powerpoint_say_their_core_properties() -> None:
    core = {
        "title": "Harbour Records",
        "author": "Ann Lee",
        "created": dt.datetime(2024, 5, 1, 10, 0),
        "modified": dt.datetime(2024, 5, 2, 11, 30),
    }
    expected = {
        "title": "Harbour Records",
        "author": "Ann Lee",
        "created": "2024-05-01T10:00:00Z",
        "modified": "2024-05-02T11:30:00Z",
    }
    word = parse_bytes(with_core(docx_file(book(seed=41, pages=2)), "docx", **core), "r.docx")
    assert word.properties == {"type": "docx", **expected}
    deck = with_core(pptx_file(book(seed=42, pages=3, per_page=1)), "pptx", **core)
    assert parse_bytes(deck, "talk.pptx").properties == {"type": "pptx", **expected, "pages": 3}


def test_hostile_office_properties_are_dropped_and_the_file_is_read() -> None:
    data = with_core(
        docx_file(book(seed=43, pages=1)),
        "docx",
        title="\u202eTitle\u200f ",
        author="someone",
        created=dt.datetime(2024, 5, 1),
    )

    def spoil(core: bytes) -> bytes:  # what python-docx itself would not write
        core = re.sub(rb"(<dc:creator[^>]*>)[^<]*", rb"\g<1>" + b"B" * 4000, core)
        core = re.sub(rb"(<dcterms:created[^>]*>)[^<]*", rb"\g<1>not a date", core)
        return re.sub(rb"(<dcterms:modified[^>]*>)[^<]*", rb"\g<1>9999-12-31T00:00:00Z", core)

    doc = parse_bytes(replace_member(data, "docProps/core.xml", spoil), "spoiled.docx")
    assert doc.text
    assert doc.properties == {"type": "docx", "title": "Title", "author": "B" * MAX_CHARS}


# -- web pages, Markdown, text --------------------------------------------------------------

PAGE = """<!doctype html><html><head><title>Harbour records</title>
<meta name="author" content="Ann Lee">
<meta property="article:published_time" content="2024-05-01T12:00:00+02:00">
<meta http-equiv="last-modified" content="Thu, 02 May 2024 09:00:00 GMT">
<meta name="date" content="someday">
</head><body><article><h1>The harbour</h1><p>The river valley carried water from distant
mountains toward a quiet harbour where merchants traded grain, timber, copper and salt.</p>
</article></body></html>"""


def test_a_web_page_says_its_title_author_and_dates() -> None:
    doc = parse_bytes(PAGE.encode(), "page.html")
    assert doc.properties == {
        "type": "html",
        "title": "Harbour records",
        "author": "Ann Lee",
        "created": "2024-05-01T10:00:00Z",
        "modified": "2024-05-02T09:00:00Z",
    }
    dated = PAGE.replace('<meta property="article:published_time" ', '<meta name="x" ')
    dated = dated.replace('content="someday"', 'content="2024-04-30"')
    assert parse_bytes(dated.encode(), "p.html").properties["created"] == "2024-04-30T00:00:00Z"


def test_a_web_page_with_junk_meta_is_still_read() -> None:
    junk = "".join(
        f'<meta name="author" content="{"x" * 900}"><meta name="dcterms.created" content="{i}">'
        for i in range(1500)
    )
    page = PAGE.replace("<title>Harbour records</title>", junk).replace('content="Ann Lee"', "")
    doc = parse_bytes(page.encode(), "junk.html")
    assert "quiet harbour" in doc.text
    assert doc.properties["author"] == "x" * MAX_CHARS
    assert "created" not in doc.properties


def test_markdown_front_matter_and_plain_text() -> None:
    markdown = (
        "---\n"
        'title: "Harbour: notes"\n'
        "authors:\n  - Ann Lee\n  - Bo Chen\n"
        "date: 2024-05-01\n"
        "updated: 2024-05-02 12:00:00 +02:00\n"
        "tags: [sea, trade]\n"
        "---\n\n# Notes\n\nThe canal opened in 1914.\n"
    )
    doc = parse_bytes(markdown.encode(), "notes.md")
    assert doc.properties == {
        "type": "markdown",
        "title": "Harbour: notes",
        "author": "Ann Lee, Bo Chen",
        "created": "2024-05-01T00:00:00Z",
        "modified": "2024-05-02T10:00:00Z",
    }
    bad = "---\ntitle: [unclosed\ndate: not-a-date\nauthor: [A, 'B']\n---\nText.\n"
    assert parse_bytes(bad.encode(), "bad.md").properties == {
        "type": "markdown",
        "title": "[unclosed",
        "author": "A, B",
    }
    assert parse_bytes(b"No front matter.", "plain.md").properties == {"type": "markdown"}
    assert parse_bytes(b"---\ntitle: x\n---\nwords", "a.txt").properties == {"type": "text"}


# -- images ---------------------------------------------------------------------------------


def test_an_image_says_its_exif() -> None:
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", (900, 160), 255)
    font = ImageFont.truetype(str(FONT), 40)
    ImageDraw.Draw(image).text((30, 50), "Harbour records of the sea", font=font, fill=0)
    exif = Image.Exif()
    exif[0x013B] = "Ann Lee"  # Artist
    exif[0x0132] = "2024:05:02 09:00:00"  # DateTime
    inner = exif.get_ifd(0x8769)
    inner[0x9003] = "2024:05:01 12:00:00"  # DateTimeOriginal
    inner[0x9011] = "+02:00"  # OffsetTimeOriginal
    doc = parse_bytes(image_bytes(image, "JPEG", exif=exif.tobytes()), "photo.jpg")
    assert "Harbour" in doc.text
    assert doc.properties == {
        "type": "image",
        "author": "Ann Lee",
        "created": "2024-05-01T10:00:00Z",
        "modified": "2024-05-02T09:00:00Z",
        "pages": 1,
    }
    junk = Image.Exif()
    junk[0x013B] = "\x00\x00"
    junk[0x0132] = "    :  :     :  :  "
    plain = parse_bytes(image_bytes(image, "PNG", exif=junk.tobytes()), "photo.png")
    assert plain.properties == {"type": "image", "pages": 1}


# -- the document's metadata ----------------------------------------------------------------


def _message(metadata: dict[str, Any] | None = None) -> IngestFile:
    ref = FileRef(
        bucket=sj.FILES_BUCKET, name="default/r.pdf", sha256="a" * 64, size=10, filename="r.pdf"
    )
    document = FileDocument(id="r.pdf", file=ref, metadata=metadata or {})
    return IngestFile(request_id="job-1", document=document)


def test_the_document_keeps_the_file_properties_under_file() -> None:
    info = b"/Title (Harbour Records) /Author (Ann Lee) /CreationDate (D:20240501120000+02'00')"
    parsed = parse_bytes(info_pdf(info, pages=2), "r.pdf")
    document = made_document(_message({"team": "finance"}), parsed)
    assert document.metadata == {
        "team": "finance",
        "source": "r.pdf",
        "media_type": "application/pdf",
        "file": {
            "type": "pdf",
            "title": "Harbour Records",
            "author": "Ann Lee",
            "created": "2024-05-01T10:00:00Z",
            "pages": 2,
        },
    }
    check_metadata(document.metadata)


def test_the_callers_file_wins_and_hostile_properties_are_cleaned() -> None:
    parsed = parse_bytes(info_pdf(b"/Author (Ann Lee)"), "r.pdf")
    mine = made_document(_message({"file": {"type": "contract"}}), parsed)
    assert mine.metadata["file"] == {"type": "contract"}
    forged = ParsedDocument(
        title="t",
        text="Some text.",
        pages=[],
        media_type="application/pdf",
        properties={
            "type": "pdf",
            "author": "\x1b[31m" + "z" * 10_000,
            "created": "2024-13-45",
            "pages": float("inf"),
            "nested": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": "deep"}}}}}}}},
        },
    )
    document = made_document(_message(), forged)
    assert document.metadata["file"] == {"type": "pdf", "author": "[31m" + "z" * (MAX_CHARS - 4)}
    check_metadata(document.metadata)


def test_file_properties_never_take_the_metadata_past_its_bound() -> None:
    parsed = parse_bytes(info_pdf(b"/Title (" + b"T" * 600 + b")"), "r.pdf")
    room = MAX_METADATA_CHARS - 200
    document = made_document(_message({"notes": "n" * room}), parsed)
    assert "file" not in document.metadata, "dropped rather than failing the file"
    assert document.metadata["source"] == "r.pdf"


async def test_the_properties_cross_the_parser_pool() -> None:
    data = text_pdf(book(seed=44, pages=2), title="Pooled")
    pool = ParserPool(ParseLimits(timeout_s=30.0))
    try:
        pooled = await pool.parse(data, "pooled.pdf")
    finally:
        await pool.aclose()
    assert pooled.properties == parse_bytes(data, "pooled.pdf").properties
    assert pooled.properties["title"] == "Pooled" and pooled.properties["pages"] == 2
