"""Files made from text the tests know, for the document parsers' tests (no tests here): PDFs
with a text layer (fpdf2, DejaVu Sans), page images as a scanner would make them (Pillow, at
300 dpi) and PDFs of them with no text layer, Word and PowerPoint files, and the scores that
compare what a parser read with what was written."""

from __future__ import annotations

import io
import random
import re
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
FONT_BOLD = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf")
DATA = Path(__file__).resolve().parents[1] / "data" / "documents"

_VOCABULARY = """
the river valley carried water from distant mountains toward a quiet harbour where merchants
traded grain timber copper and salt while scholars wrote careful records of weather tides
harvests and journeys across the northern sea many travellers described bright lighthouses
tall stone bridges narrow streets crowded markets and gardens full of orange trees the council
decided to build a new library beside the old temple so that every student could read books
about medicine astronomy geometry music history and law engineers measured the canal twice
before winter because heavy storms often flooded the lower fields farmers planted barley wheat
olives and grapes on terraces cut into the hills fishermen repaired their nets each morning
children learned letters numbers and songs the governor signed an agreement with neighbouring
cities to share roads ports and courts travelling physicians visited villages during spring
and autumn offering remedies made from herbs honey vinegar and mineral springs
"""
_WORDS = tuple(_VOCABULARY.split())


def sentences(seed: int, count: int, words: tuple[int, int] = (7, 16)) -> list[str]:
    """`count` plain English-looking sentences, the same for the same seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        chosen = [rng.choice(_WORDS) for _ in range(rng.randint(*words))]
        out.append(" ".join(chosen).capitalize() + ".")
    return out


def paragraphs(seed: int, count: int, per: int = 4) -> list[str]:
    said = sentences(seed, count * per)
    return [" ".join(said[i * per : (i + 1) * per]) for i in range(count)]


_TOKEN = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return [w.lower() for w in _TOKEN.findall(text)]


def word_recall(expected: str, got: str) -> float:
    """The share of the expected words (with multiplicity) that were read."""
    want: dict[str, int] = {}
    for w in words(expected):
        want[w] = want.get(w, 0) + 1
    have: dict[str, int] = {}
    for w in words(got):
        have[w] = have.get(w, 0) + 1
    total = sum(want.values())
    return sum(min(n, have.get(w, 0)) for w, n in want.items()) / max(total, 1)


@dataclass
class Page:
    heading: str = ""
    paragraphs: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n\n".join([self.heading, *self.paragraphs] if self.heading else self.paragraphs)


def book(seed: int, pages: int, per_page: int = 3) -> list[Page]:
    """Pages of known text: a heading and `per_page` paragraphs each."""
    heads = sentences(seed + 1000, pages, words=(2, 4))
    return [Page(heads[i].rstrip("."), paragraphs(seed * 7919 + i, per_page)) for i in range(pages)]


def text_pdf(pages: Sequence[Page], title: str = "", blank: Sequence[int] = ()) -> bytes:
    """A PDF with a text layer: each page its heading in 16 pt and paragraphs in 11 pt (a
    page number in `blank` is left empty)."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(False)
    pdf.add_font("DejaVu", "", str(FONT))
    pdf.add_font("DejaVu", "B", str(FONT_BOLD))
    if title:
        pdf.set_title(title)
    for number, page in enumerate(pages, 1):
        pdf.add_page()
        if number in blank:
            continue
        if page.heading:
            pdf.set_font("DejaVu", "B", 16)
            pdf.multi_cell(0, 9, page.heading, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(4)
        pdf.set_font("DejaVu", "", 11)
        for para in page.paragraphs:
            pdf.multi_cell(0, 5.5, para, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(4)
    return bytes(pdf.output())


def scan_image(page: Page, dpi: int = 300, size_pt: float = 11.0):  # -> PIL.Image.Image
    """One A4 page as a scanner at `dpi` would see it: black text on white, grey scale."""
    from PIL import Image, ImageDraw, ImageFont

    width, height = int(8.27 * dpi), int(11.69 * dpi)
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    margin = int(0.9 * dpi)
    body = ImageFont.truetype(str(FONT), int(size_pt * dpi / 72))
    head = ImageFont.truetype(str(FONT_BOLD), int(16 * dpi / 72))
    y = margin
    blocks = ([(page.heading, head)] if page.heading else []) + [(p, body) for p in page.paragraphs]
    for text, font in blocks:
        line_height = int(font.size * 1.45)
        line = ""
        for word in text.split():
            trial = f"{line} {word}".strip()
            if draw.textlength(trial, font=font) > width - 2 * margin and line:
                draw.text((margin, y), line, font=font, fill=0)
                y += line_height
                line = word
            else:
                line = trial
        if line:
            draw.text((margin, y), line, font=font, fill=0)
            y += line_height
        y += line_height // 2
    image.info["dpi"] = (dpi, dpi)
    return image


def scanned_pdf(pages: Sequence[Page], dpi: int = 300) -> bytes:
    """A PDF of page images and no text layer, as a scanner writes one."""
    images = [scan_image(page, dpi) for page in pages]
    out = io.BytesIO()
    images[0].save(out, "PDF", resolution=float(dpi), save_all=True, append_images=images[1:])
    return out.getvalue()


def image_bytes(image, kind: str, **options: object) -> bytes:  # image: PIL.Image.Image
    out = io.BytesIO()
    image.save(out, kind, **options)
    return out.getvalue()


def docx_file(pages: Sequence[Page], title: str = "", table: Sequence[Sequence[str]] = ()) -> bytes:
    """A Word file: each page's heading as Heading 1, its paragraphs, and `table` after the
    first page's paragraphs."""
    import docx

    document = docx.Document()
    if title:
        document.core_properties.title = title
    for number, page in enumerate(pages, 1):
        document.add_heading(page.heading, level=1)
        for para in page.paragraphs:
            document.add_paragraph(para)
        if number == 1 and table:
            grid = document.add_table(rows=len(table), cols=len(table[0]))
            for r, row in enumerate(table):
                for c, cell in enumerate(row):
                    grid.cell(r, c).text = cell
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pptx_file(
    pages: Sequence[Page], notes: Sequence[str] = (), table: Sequence[Sequence[str]] = ()
) -> bytes:
    """A PowerPoint deck: one slide per page, its heading the slide's title, its paragraphs
    the body's; slide i's notes are `notes[i]`; `table` goes on the last slide."""
    import pptx
    from pptx.util import Inches

    deck = pptx.Presentation()
    layout = deck.slide_layouts[1]  # title and content
    for number, page in enumerate(pages, 1):
        slide = deck.slides.add_slide(layout)
        slide.shapes.title.text = page.heading
        body = slide.placeholders[1].text_frame
        body.text = page.paragraphs[0] if page.paragraphs else ""
        for para in page.paragraphs[1:]:
            body.add_paragraph().text = para
        if number <= len(notes):
            slide.notes_slide.notes_text_frame.text = notes[number - 1]
        if number == len(pages) and table:
            shape = slide.shapes.add_table(
                len(table), len(table[0]), Inches(1), Inches(5), Inches(6), Inches(1.5)
            )
            for r, row in enumerate(table):
                for c, cell in enumerate(row):
                    shape.table.cell(r, c).text = cell
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def pdf_objects(objects: Sequence[bytes], root: int = 1) -> bytes:
    """A PDF written by hand from its objects (numbered from 1), with a correct xref."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        root,
        xref,
    )
    return bytes(out)


def many_pages_pdf(pages: int) -> bytes:
    """A PDF of `pages` empty pages, small and made in milliseconds."""
    kids = b" ".join(b"%d 0 R" % (3 + i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
    ]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"] * pages
    return pdf_objects(objects)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims `width` x `height` pixels (a decompression bomb's header) and holds
    almost nothing."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


def zip_of_entries(
    count: int, *, claimed: int | None = None, directory_size: int | None = None
) -> bytes:
    """A zip of `count` empty entries, the first `word/document.xml`, written by hand as a
    zip bomb's maker would: its end record may claim another count (at most 65,535, all an end
    record holds), or another directory size."""
    local, directory = io.BytesIO(), io.BytesIO()
    for index in range(count):
        name = b"word/document.xml" if index == 0 else b"%d" % index
        offset = local.tell()
        local.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0))
        local.write(name)
        fields = (b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0, 0, 0, 0, 0, offset)
        directory.write(struct.pack("<4s6H3L5H2L", *fields))
        directory.write(name)
    entries = min(claimed if claimed is not None else count, 0xFFFF)
    size = directory_size if directory_size is not None else directory.tell()
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, entries, entries, size, local.tell(), 0)
    return local.getvalue() + directory.getvalue() + end
