"""Word, PowerPoint, web pages, Markdown, text and images: made from known text (and public
files), read back whole, in order, in the text conventions; bad ones refused."""

from __future__ import annotations

import io

import pytest

from infra.documents import ParsedDocument, ParseLimits, ParseRefused, parse_bytes
from infra.documents.html import markdown_text
from infra.documents.model import DOCX, HTML, MARKDOWN, PPTX, TEXT, TIFF
from tests.unit.test_documents_support import (
    DATA,
    book,
    docx_file,
    image_bytes,
    png_header_only,
    pptx_file,
    scan_image,
    word_recall,
)

TABLE = [["Good", "Price", "Port"], ["Grain", "3 coins", "Ostia"], ["Salt", "5 coins", "Tyre"]]


def span_text(doc: ParsedDocument, number: int) -> str:
    start = doc.pages[number - 1].start
    end = doc.pages[number].start if number < len(doc.pages) else len(doc.text)
    return doc.text[start:end]


def test_word_file_in_body_order_with_headings_and_tables() -> None:
    pages = book(seed=21, pages=3)
    doc = parse_bytes(docx_file(pages, title="Harbour Records", table=TABLE), "records.docx")
    assert doc.media_type == DOCX
    assert doc.pages == []
    assert doc.title == "Harbour Records"
    expected = "\n\n".join(p.text for p in pages)
    assert word_recall(expected, doc.text) >= 0.99
    for page in pages:
        assert f"# {page.heading}\n\n{page.paragraphs[0]}" in doc.text
    table = "Good | Price | Port\nGrain | 3 coins | Ostia\nSalt | 5 coins | Tyre"
    # the table sits where it was written: after the first section's paragraphs
    assert f"{pages[0].paragraphs[-1]}\n\n{table}\n\n# {pages[1].heading}" in doc.text


def test_word_title_falls_back_to_the_first_heading() -> None:
    pages = book(seed=22, pages=1)
    assert parse_bytes(docx_file(pages), "x.docx").title == pages[0].heading


def test_public_word_files() -> None:
    doc = parse_bytes((DATA / "test.docx").read_bytes(), "test.docx")
    assert doc.text == "# python-docx was here!\n\npython-docx was here too!"
    assert doc.title == "python-docx was here!"
    mixed = parse_bytes((DATA / "blk-paras-and-tables.docx").read_bytes(), "blk.docx")
    lorem = "Lorem ipsum dolor sit amet, consectetur adipiscing elit."
    donec = "Donec semper facilisis metus finibus malesuada."
    assert mixed.text.index(lorem) < mixed.text.index("Text before") < mixed.text.index(donec)


def test_powerpoint_one_page_per_slide_with_notes_and_tables() -> None:
    pages = book(seed=23, pages=3, per_page=2)
    notes = ["Speak slowly about the harbour.", "", "Thank the council."]
    doc = parse_bytes(pptx_file(pages, notes=notes, table=TABLE), "talk.pptx")
    assert doc.media_type == PPTX
    assert [(s.number, s.label) for s in doc.pages] == [(i, f"slide {i}") for i in (1, 2, 3)]
    assert doc.title == pages[0].heading
    for number, page in enumerate(pages, 1):
        text = span_text(doc, number)
        assert text.startswith(f"## {page.heading}\n\n{page.paragraphs[0]}\n\n")
        assert word_recall(page.text, text) >= 0.99
    assert span_text(doc, 1).rstrip().endswith("Speak slowly about the harbour.")
    assert "Grain | 3 coins | Ostia" in span_text(doc, 3)
    assert span_text(doc, 3).rstrip().endswith("Thank the council.")


def test_public_powerpoint_files() -> None:
    doc = parse_bytes((DATA / "test.pptx").read_bytes(), "test.pptx")
    assert doc.text == "## Presentation Title Text\n\nSubtitle Text"
    assert doc.title == "Presentation Title Text"
    tables = parse_bytes((DATA / "tbl-cell.pptx").read_bytes(), "tbl-cell.pptx")
    assert len(tables.pages) == 3
    assert "a | b | c\nd | e | f\ng | h | i" in tables.text


def test_slides_over_the_page_limit_are_refused() -> None:
    data = pptx_file(book(seed=24, pages=4, per_page=1))
    with pytest.raises(ParseRefused) as refused:
        parse_bytes(data, "deck.pptx", ParseLimits(max_pages=2))
    assert str(refused.value) == "deck.pptx has 4 slides; at most 2 are read (RAGBUS_MAX_PAGES)"


def test_damaged_office_files_are_refused() -> None:
    good = docx_file(book(seed=25, pages=1))
    broken = good.replace(b"word/document.xml", b"word/documant.xml")
    with pytest.raises(ParseRefused, match=r"^x\.docx is not a kind ragbus reads \(a zip archive"):
        parse_bytes(broken, "x.docx")
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("word/document.xml", "<not-xml")
    with pytest.raises(
        ParseRefused, match=r"^y\.docx is a damaged Word file; ragbus cannot read it$"
    ):
        parse_bytes(out.getvalue(), "y.docx")


PAGE = """<!doctype html><html><head><title>Harbour records</title></head><body>
<nav><a href="/">Home</a> <a href="/about">About us</a> <a href="/shop">Shop</a></nav>
<div class="cookie-banner">We use cookies to improve your experience. Accept all cookies.</div>
<article><h1>The harbour</h1><p>The river valley carried water
from distant mountains toward a quiet harbour where merchants traded grain.</p>
<h2>Trade</h2><p>Scholars wrote careful records of weather, tides and harvests across the
northern sea, every year and every season, in the old library by the temple.</p>
<table><tr><th>Good</th><th>Price</th></tr><tr><td>Grain</td><td>3 coins</td></tr></table>
</article>
<footer>Copyright 2024 Harbour Inc. All rights reserved. Imprint.</footer></body></html>"""


def test_web_page_main_content_only() -> None:
    doc = parse_bytes(PAGE.encode(), "harbour.html")
    assert doc.media_type == HTML
    assert doc.pages == []
    assert doc.title in ("The harbour", "Harbour records")
    assert "# The harbour\n\n" in doc.text
    assert "## Trade\n\n" in doc.text
    assert (
        "The river valley carried water from distant mountains toward a quiet harbour where "
        "merchants traded grain." in doc.text
    )
    assert "Good | Price\nGrain | 3 coins" in doc.text
    for dropped in ("cookies", "About us", "Copyright", "|---"):
        assert dropped not in doc.text


@pytest.mark.parametrize(
    ("name", "kept", "dropped"),
    [
        (
            "wiki.python.org.Download.html",
            ["Before you start, you will need Python on your computer.", "general download page"],
            ["Unable to edit the page? See the FrontPage for instructions.", "Login"],
        ),
        (
            "anarc.at.cdpath.html",
            ["I figured I might as well bite the", "this list through a command or the menu"],
            ["Copyleft © 2002-2016 The Anarcat", "Powered by"],
        ),
    ],
)
def test_public_web_pages(name: str, kept: list[str], dropped: list[str]) -> None:
    doc = parse_bytes((DATA / name).read_bytes(), name)
    for snippet in kept:
        assert snippet in doc.text
    for snippet in dropped:
        assert snippet not in doc.text
    assert doc.title


def test_page_with_no_main_content_falls_back_to_its_body() -> None:
    doc = parse_bytes(b"<html><body><div>Hi</div><div>there</div></body></html>", "tiny.html")
    assert "Hi" in doc.text and "there" in doc.text
    with pytest.raises(ParseRefused, match=r"^empty\.html holds no text$"):
        parse_bytes(b"<html><body><script>var x = 1;</script></body></html>", "empty.html")


def test_markdown_tables_and_wrapped_lines() -> None:
    markdown = "# T\n\nOne line\nwrapped here.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- x\n- y\n"
    assert markdown_text(markdown) == "# T\n\nOne line wrapped here.\n\na | b\n1 | 2\n\n- x\n- y"


def test_markdown_and_text() -> None:
    text = "Intro line.\r\n\r\n\r\n# Harbour\n\nBody\x00 text.\n"
    doc = parse_bytes(text.encode(), "notes.md")
    assert doc.media_type == MARKDOWN
    assert doc.title == "Harbour"
    assert doc.text == "Intro line.\n\n# Harbour\n\nBody text."
    plain = parse_bytes(b"Just words\nhere.", "/tmp/some notes.txt")
    assert plain.media_type == TEXT
    assert plain.title == "some notes"
    assert plain.text == "Just words\nhere."
    latin = parse_bytes("Caf\u00e9 ol\u00e9".encode() + b" \xe9t\xe9", "cafe.txt")
    assert latin.text.startswith("Café olé")
    with pytest.raises(ParseRefused, match=r"^blank\.md holds no text$"):
        parse_bytes(b"\n\n   \n", "blank.md")


def test_image_files_are_read_by_ocr() -> None:
    page = book(seed=26, pages=1)[0]
    image = scan_image(page, dpi=200)
    for kind, name in (("PNG", "scan.png"), ("JPEG", "scan.jpg")):
        doc = parse_bytes(image_bytes(image, kind, dpi=(200, 200)), name)
        assert doc.ocr_pages == 1
        assert [(s.number, s.label) for s in doc.pages] == [(1, "p. 1")]
        assert word_recall(page.text, doc.text) >= 0.95
        assert doc.title == "scan"


def test_transparent_image_is_read_on_white() -> None:
    from PIL import Image

    page = book(seed=27, pages=1)[0]
    grey = scan_image(page, dpi=150)
    rgba = Image.new("RGBA", grey.size, (0, 0, 0, 0))
    rgba.putalpha(Image.eval(grey, lambda v: 255 - v))  # black text, transparent ground
    doc = parse_bytes(image_bytes(rgba, "PNG"), "overlay.png")
    assert word_recall(page.text, doc.text) >= 0.95


def test_multi_frame_tiff_is_one_page_per_frame() -> None:
    pages = book(seed=28, pages=2, per_page=1)
    frames = [scan_image(page, dpi=150) for page in pages]
    data = image_bytes(frames[0], "TIFF", save_all=True, append_images=frames[1:], dpi=(150, 150))
    doc = parse_bytes(data, "fax.tiff")
    assert doc.media_type == TIFF
    assert doc.ocr_pages == 2
    for number, page in enumerate(pages, 1):
        assert word_recall(page.text, span_text(doc, number)) >= 0.95
    with pytest.raises(ParseRefused) as refused:
        parse_bytes(data, "fax.tiff", ParseLimits(max_pages=1))
    assert str(refused.value) == "fax.tiff has 2 pages; at most 1 are read (RAGBUS_MAX_PAGES)"


def test_public_scan() -> None:
    doc = parse_bytes((DATA / "phototest.tif").read_bytes(), "phototest.tif")
    expected = (DATA / "phototest.txt").read_text()
    assert word_recall(expected, doc.text) >= 0.95
    assert doc.text.startswith("This is a lot of 12 point text to test the ocr code")


def test_image_decompression_bomb_is_refused() -> None:
    bomb = png_header_only(30_000, 30_000)
    assert len(bomb) < 200
    with pytest.raises(ParseRefused) as refused:
        parse_bytes(bomb, "huge.png")
    assert str(refused.value) == (
        "huge.png is an image of 900,000,000 pixels; at most 60,000,000 are read "
        "(a decompression bomb?)"
    )


def test_damaged_and_textless_images_are_refused() -> None:
    from PIL import Image

    good = image_bytes(scan_image(book(seed=29, pages=1)[0], dpi=100), "PNG")
    with pytest.raises(ParseRefused, match=r"^cut\.png is a damaged image"):
        parse_bytes(good[: len(good) // 2], "cut.png")
    white = image_bytes(Image.new("L", (400, 300), 255), "PNG")
    with pytest.raises(ParseRefused, match=r"^white\.png holds no text that OCR could read$"):
        parse_bytes(white, "white.png")
