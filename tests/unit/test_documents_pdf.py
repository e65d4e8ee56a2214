"""PDFs: text layers read whole and in place (each page's text inside its page span), scans
read by OCR, public PDFs, and every kind of bad PDF refused with its reason."""

from __future__ import annotations

import io
import time

import pytest

from contracts.ingest import PageSpan
from infra.documents import ParsedDocument, ParseLimits, ParseRefused, ParserFailed, parse_bytes
from infra.documents import ocr as ocr_module
from infra.documents import pdf as pdf_module
from tests.unit.test_documents_support import (
    DATA,
    FONT,
    Page,
    book,
    many_pages_pdf,
    pdf_objects,
    scan_image,
    scanned_pdf,
    text_pdf,
    word_recall,
)


def page_text(doc: ParsedDocument, number: int) -> str:
    """The text of page `number` (1-based), as its span says."""
    spans = doc.pages
    start = spans[number - 1].start
    end = spans[number].start if number < len(spans) else len(doc.text)
    return doc.text[start:end]


def page_of(doc: ParsedDocument, snippet: str) -> int:
    """The number of the page whose span holds `snippet`."""
    at = doc.text.index(snippet)
    return max(span.number for span in doc.pages if span.start <= at)


@pytest.fixture(scope="module")
def five_pages() -> list[Page]:
    return book(seed=3, pages=5)


@pytest.fixture(scope="module")
def parsed_five(five_pages: list[Page]) -> ParsedDocument:
    return parse_bytes(text_pdf(five_pages, title="Harbour Records"), "records.pdf")


def test_text_layer_is_read_whole_and_in_place(
    five_pages: list[Page], parsed_five: ParsedDocument
) -> None:
    doc = parsed_five
    assert doc.media_type == "application/pdf"
    assert doc.ocr_pages == 0
    assert doc.title == "Harbour Records"  # the PDF's own metadata
    assert [(s.number, s.label) for s in doc.pages] == [(i, f"p. {i}") for i in range(1, 6)]
    assert [s.start for s in doc.pages] == sorted(s.start for s in doc.pages)
    for number, page in enumerate(five_pages, 1):
        assert word_recall(page.text, page_text(doc, number)) >= 0.99
        for paragraph in page.paragraphs:
            # one paragraph, one line: the PDF's line breaks inside it are gone
            assert paragraph in doc.text
            assert page_of(doc, paragraph) == number
        assert f"# {page.heading}\n\n" in page_text(doc, number)
    assert "\n\n\n" not in doc.text


def test_pages_validate_as_the_contract_wants(parsed_five: ParsedDocument) -> None:
    from contracts.ingest import DocumentIn

    DocumentIn(id="records", text=parsed_five.text, pages=parsed_five.pages)


def test_title_without_metadata_is_the_first_heading(five_pages: list[Page]) -> None:
    doc = parse_bytes(text_pdf(five_pages), "untitled-scan.pdf")
    assert doc.title == five_pages[0].heading


def test_an_empty_page_still_has_its_span() -> None:
    pages = book(seed=4, pages=3)
    doc = parse_bytes(text_pdf(pages, blank=[2]), "gap.pdf")
    assert [s.number for s in doc.pages] == [1, 2, 3]
    assert doc.pages[1].start == doc.pages[2].start
    assert page_of(doc, pages[2].paragraphs[0]) == 3
    assert doc.ocr_pages == 0  # no image on the page: nothing to read by OCR


def test_lines_are_joined_and_words_broken_at_a_line_end_mended() -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_font("DejaVu", "", str(FONT))
    pdf.add_page()
    pdf.set_font("DejaVu", "", 11)
    lines = [
        "This line shows an exam-",
        "ple of a word broken in two, and Jean-",
        "Paul who keeps his hyphen, as 2019-",
        "2020 does.",
    ]
    for line in lines:
        pdf.cell(0, 5.5, line, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(8)
    pdf.cell(0, 5.5, "A second paragraph after a gap.", new_x="LMARGIN", new_y="NEXT")
    doc = parse_bytes(bytes(pdf.output()), "hyphens.pdf")
    assert doc.text == (
        "This line shows an example of a word broken in two, and Jean-Paul who keeps his "
        "hyphen, as 2019-2020 does.\n\nA second paragraph after a gap."
    )


@pytest.fixture(scope="module")
def scanned() -> tuple[list[Page], ParsedDocument]:
    pages = book(seed=5, pages=3)
    return pages, parse_bytes(scanned_pdf(pages), "scan.pdf")


def test_scanned_pages_are_read_by_ocr(scanned: tuple[list[Page], ParsedDocument]) -> None:
    pages, doc = scanned
    assert doc.ocr_pages == 3
    assert [s.number for s in doc.pages] == [1, 2, 3]
    for number, page in enumerate(pages, 1):
        assert word_recall(page.text, page_text(doc, number)) >= 0.95
        first = " ".join(page.paragraphs[0].split()[:6])
        assert page_of(doc, first) == number
    # OCR's lines are joined into paragraphs too
    assert all(len(p) > 200 for p in doc.text.split("\n\n")[1:3])


def test_text_pages_and_scanned_pages_in_one_pdf() -> None:
    from fpdf import FPDF

    pages = book(seed=6, pages=2)
    pdf = FPDF(format="A4")
    pdf.add_font("DejaVu", "", str(FONT))
    pdf.add_page()
    pdf.set_font("DejaVu", "", 11)
    pdf.multi_cell(0, 5.5, "\n\n".join(pages[0].paragraphs))
    pdf.add_page()
    pdf.image(scan_image(pages[1], dpi=200), x=0, y=0, w=210)
    doc = parse_bytes(bytes(pdf.output()), "mixed.pdf")
    assert doc.ocr_pages == 1
    assert word_recall(" ".join(pages[0].paragraphs), page_text(doc, 1)) >= 0.99
    assert word_recall(pages[1].text, page_text(doc, 2)) >= 0.95


def test_public_pdfs_read_as_pdfium_reads_their_pages() -> None:
    import pypdfium2

    for name, count in (("pdflatex-4-pages.pdf", 4), ("multicolumn.pdf", 3)):
        data = (DATA / name).read_bytes()
        doc = parse_bytes(data, name)
        assert len(doc.pages) == count
        reference = pypdfium2.PdfDocument(data)
        for number in range(1, count + 1):
            raw = reference[number - 1].get_textpage().get_text_bounded()
            assert word_recall(raw.replace("\x02", ""), page_text(doc, number)) >= 0.99
        reference.close()
    multicolumn = parse_bytes((DATA / "multicolumn.pdf").read_bytes(), "multicolumn.pdf")
    assert multicolumn.title == "Two-Column Document with Lorem Ipsum"
    assert multicolumn.text.startswith("# Two-Column Document with Lorem Ipsum\n\n")
    assert "consectetuer adipiscing elit." in multicolumn.text  # "adip-" + "iscing"


def test_public_pdf_title_comes_from_its_metadata() -> None:
    doc = parse_bytes((DATA / "google-doc-document.pdf").read_bytes(), "google-doc-document.pdf")
    assert doc.title == "PDF Example Document"
    assert "Beautiful is better than ugly. Explicit is better than implicit." in doc.text
    assert "In the face of ambiguity, refuse the temptation to guess." in doc.text


def refusal(data: bytes, name: str, limits: ParseLimits | None = None) -> str:
    with pytest.raises(ParseRefused) as refused:
        parse_bytes(data, name, limits)
    return str(refused.value)


def test_encrypted_pdf_is_refused() -> None:
    data = (DATA / "libreoffice-writer-password.pdf").read_bytes()
    assert refusal(data, "minutes.pdf") == (
        "minutes.pdf is encrypted (password-protected); ragbus cannot read it"
    )


def test_truncated_and_corrupt_pdfs_are_refused() -> None:
    data = (DATA / "pdflatex-4-pages.pdf").read_bytes()
    assert refusal(data[: len(data) // 2], "half.pdf") == (
        "half.pdf is a damaged or truncated PDF; ragbus cannot read it"
    )
    assert refusal(b"%PDF-1.7\n" + bytes(range(256)) * 20, "junk.pdf") == (
        "junk.pdf is a damaged or truncated PDF; ragbus cannot read it"
    )


def test_pdf_without_pages_is_refused() -> None:
    empty = pdf_objects(
        [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]
    )
    assert refusal(empty, "nothing.pdf") == "nothing.pdf has no pages"
    # PDFium sets no error code for it, and reports the last failure's: the reason must not
    # depend on what was parsed before
    encrypted = (DATA / "libreoffice-writer-password.pdf").read_bytes()
    assert "encrypted" in refusal(encrypted, "secret.pdf")
    assert refusal(empty, "nothing.pdf") == "nothing.pdf has no pages"
    assert "damaged" in refusal(b"%PDF-1.4\n" + bytes(500), "junk.pdf")
    assert refusal(empty, "nothing.pdf") == "nothing.pdf has no pages"


def test_pdf_over_the_page_limit_is_refused() -> None:
    data = text_pdf(book(seed=7, pages=5))
    assert refusal(data, "long.pdf", ParseLimits(max_pages=3)) == (
        "long.pdf has 5 pages; at most 3 are read (RAGBUS_MAX_PAGES)"
    )


def test_ten_thousand_pages_are_refused_from_the_count_alone(monkeypatch) -> None:
    def no_page_may_be_read(*args: object) -> None:
        raise AssertionError("a page was read")

    monkeypatch.setattr(pdf_module, "read_page", no_page_may_be_read)
    data = many_pages_pdf(10_000)
    started = time.perf_counter()
    assert refusal(data, "phone-book.pdf") == (
        "phone-book.pdf has 10,000 pages; at most 2,000 are read (RAGBUS_MAX_PAGES)"
    )
    assert time.perf_counter() - started < 5.0


def test_pdf_with_no_text_is_refused() -> None:
    blank = text_pdf(book(seed=8, pages=2), blank=[1, 2])
    assert refusal(blank, "blank.pdf") == "blank.pdf holds no text (its pages have no text layer)"


def test_time_runs_out_between_pages() -> None:
    data = text_pdf(book(seed=9, pages=4))
    with pytest.raises(
        ParserFailed, match=r"^the parser ran past 1e-06 s on slow\.pdf; it was stopped$"
    ):
        parse_bytes(data, "slow.pdf", ParseLimits(timeout_s=1e-6))


def test_scans_without_tesseract_say_what_to_install(monkeypatch) -> None:
    monkeypatch.setattr(ocr_module, "tesseract_program", lambda: None)
    with pytest.raises(ParserFailed) as failed:
        parse_bytes(scanned_pdf(book(seed=10, pages=1), dpi=100), "scan.pdf")
    assert str(failed.value) == (
        "scan.pdf needs OCR, but the tesseract program is missing: "
        "install tesseract-ocr (make setup)"
    )


def _one_page(points: float) -> bytes:
    import pypdfium2

    pdf = pypdfium2.PdfDocument.new()
    pdf.new_page(points, points)
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


def test_a_huge_page_is_rendered_within_the_pixel_bound() -> None:
    import pypdfium2

    page = pypdfium2.PdfDocument(_one_page(2_160))[0]  # 30 x 30 inches
    limits = ParseLimits(max_pixels=4_000_000)
    image, dpi = pdf_module._render(page, 0, "poster.pdf", limits)
    assert image.width * image.height <= limits.max_pixels * 1.01
    assert dpi == 67


def test_a_page_too_large_for_ocr_is_refused_unrendered(monkeypatch) -> None:
    import pypdfium2

    page = pypdfium2.PdfDocument(_one_page(1_440_000))[0]  # 20,000 inches a side
    monkeypatch.setattr(
        pypdfium2.PdfPage, "render", lambda *a, **k: pytest.fail("the page was rendered")
    )
    with pytest.raises(ParseRefused) as refused:
        pdf_module._render(page, 2, "/x/poster.pdf", ParseLimits())
    assert str(refused.value) == (
        "poster.pdf: page 3 is 20,000 x 20,000 inches, too large to read by OCR (at 50 dpi it "
        "would be more than 60,000,000 pixels)"
    )


def test_a_scan_on_a_huge_page_is_refused_by_the_parse() -> None:
    import pypdfium2

    pdf = pypdfium2.PdfDocument(scanned_pdf(book(seed=12, pages=1), dpi=100))
    pdf[0].set_mediabox(0, 0, 1_440_000, 1_440_000)
    out = io.BytesIO()
    pdf.save(out)
    with pytest.raises(ParseRefused, match=r"page 1 is 20,000 x 20,000 inches, too large"):
        parse_bytes(out.getvalue(), "huge.pdf")


def test_spans_are_page_spans() -> None:
    doc = parse_bytes(text_pdf(book(seed=11, pages=2)), "two.pdf")
    assert all(isinstance(span, PageSpan) for span in doc.pages)
    assert doc.pages[0].named() == "p. 1"
