"""What a file is, from its bytes; names that contradict their bytes; zip bombs; files that are
nothing ragbus reads. Each refusal is asserted on its sentence."""

from __future__ import annotations

import io
import zipfile

import pytest

from infra.documents import SUPPORTED_SUFFIXES, ParseLimits, ParseRefused, parse_bytes, sniff
from infra.documents.model import DOCX, HTML, JPEG, MARKDOWN, PDF, PNG, PPTX, TEXT, TIFF
from tests.unit.test_documents_support import (
    DATA,
    book,
    docx_file,
    image_bytes,
    pptx_file,
    scan_image,
    text_pdf,
)

PAGE = "<!DOCTYPE html><html><head><title>T</title></head><body><p>Hello there.</p></body></html>"


@pytest.fixture(scope="module")
def tiny_image():
    from PIL import Image

    return Image.new("L", (8, 8), 255)


def test_suffixes() -> None:
    expected = {".pdf", ".png", ".jpg", ".jpeg", ".tif", ".tiff", ".docx", ".pptx"}
    expected |= {".html", ".htm", ".md", ".markdown", ".txt"}
    assert expected == SUPPORTED_SUFFIXES


def test_kinds_from_bytes(tiny_image) -> None:
    pages = book(1, 1)
    assert sniff(text_pdf(pages), "a.pdf") == PDF
    assert sniff(image_bytes(tiny_image, "PNG"), "a.png") == PNG
    assert sniff(image_bytes(tiny_image, "JPEG"), "a.jpg") == JPEG
    assert sniff(image_bytes(tiny_image, "TIFF"), "a.tiff") == TIFF
    big_endian = image_bytes(tiny_image, "TIFF")
    assert big_endian[:4] == b"II*\x00"
    assert sniff(b"MM\x00*" + big_endian[4:], "scan.tif") == TIFF
    assert sniff(docx_file(pages), "a.docx") == DOCX
    assert sniff(pptx_file(pages), "a.pptx") == PPTX
    assert sniff(PAGE.encode(), "a.html") == HTML
    assert sniff(b"\xef\xbb\xbf  \n<html><body>x</body></html>", "a.htm") == HTML
    assert sniff("# Title\n\nSome *text*, ünïcode.".encode(), "notes.md") == MARKDOWN
    assert sniff(b"plain words", "notes.markdown") == MARKDOWN
    assert sniff(b"plain words", "notes.txt") == TEXT
    assert sniff("déjà vu".encode("utf-16"), "notes.txt") == TEXT


def test_names_without_a_supported_suffix_are_sniffed_freely(tiny_image) -> None:
    assert sniff(text_pdf(book(1, 1)), "download") == PDF
    assert sniff(image_bytes(tiny_image, "PNG"), "scan.bin") == PNG
    assert sniff(PAGE.encode(), "index.php") == HTML
    assert sniff(b"<div><p>A fragment</p><p>of a page</p></div>", "fragment") == HTML
    assert sniff(b"just words", "README") == TEXT
    assert sniff(b"%PDF-1.4 not really", "x.PDF") == PDF  # suffixes compare lower-cased


def test_markdown_with_inline_html_stays_markdown() -> None:
    readme = b'<p align="center"><img src="logo.png"></p>\n\n# Project\n\n<div>Some</div> text.'
    assert sniff(readme, "README.md") == MARKDOWN
    assert sniff(b"Hello, no markup at all.", "page.html") == HTML


@pytest.mark.parametrize(
    ("data", "name", "message"),
    [
        (PAGE.encode(), "report.pdf", "report.pdf is named .pdf but holds HTML"),
        (b"%PDF-1.7\n", "scan.png", "scan.png is named .png but holds a PDF"),
        (PAGE.encode(), "notes.txt", "notes.txt is named .txt but holds HTML"),
        (b"%PDF-1.7\n", "deck.pptx", "deck.pptx is named .pptx but holds a PDF"),
        (b"plain text", "letter.docx", "letter.docx is named .docx but holds text"),
    ],
)
def test_a_name_that_contradicts_the_bytes_is_refused(data: bytes, name: str, message: str) -> None:
    with pytest.raises(ParseRefused) as refused:
        sniff(data, f"/some/folder/{name}")
    assert str(refused.value) == message


def test_word_named_as_powerpoint_is_refused() -> None:
    with pytest.raises(
        ParseRefused, match=r"^deck\.pptx is named \.pptx but holds a Word document"
    ):
        sniff(docx_file(book(1, 1)), "deck.pptx")


def test_images_of_one_kind_named_as_another_are_read(tiny_image) -> None:
    assert sniff(image_bytes(tiny_image, "JPEG"), "photo.png") == JPEG


@pytest.mark.parametrize(
    ("data", "name", "message"),
    [
        (b"", "empty.pdf", "empty.pdf is empty"),
        (bytes(range(256)) * 8, "junk.bin", "junk.bin is not a kind ragbus reads (binary data"),
        (b"\x00\x01\x02garbage\xff\xfe" * 100, "notes.txt", "notes.txt is not a kind ragbus reads"),
        (b"GIF89a" + bytes(200), "anim.gif", "anim.gif is not a kind ragbus reads"),
        (
            b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600),
            "old.doc",
            "old.doc is not a kind ragbus reads (an old binary Office file",
        ),
        (
            b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + "EncryptedPackage".encode("utf-16-le"),
            "secret.docx",
            "secret.docx is encrypted (password-protected); ragbus cannot read it",
        ),
        (b"PK\x03\x04" + bytes(100), "broken.docx", "broken.docx is a damaged zip archive"),
        (b"PK\x05\x06" + bytes(18), "empty.zip", "empty.zip is an empty zip archive"),
    ],
)
def test_what_is_not_read_is_refused(data: bytes, name: str, message: str) -> None:
    with pytest.raises(ParseRefused) as refused:
        parse_bytes(data, name)
    assert str(refused.value).startswith(message)


def test_zip_that_is_no_office_file_is_refused() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("xl/workbook.xml", "<workbook/>")
    with pytest.raises(ParseRefused, match=r"^book\.zip is not a kind ragbus reads \(an Excel"):
        sniff(out.getvalue(), "book.zip")


def _zeros_member(name: str, megabytes: int, extra: dict[str, str] | None = None) -> bytes:
    """A zip holding `megabytes` MiB of zeros as `name`, written streamed (never all in memory
    unpacked): small on disk, as a zip bomb is."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for member, text in (extra or {}).items():
            archive.writestr(member, text)
        with archive.open(name, "w", force_zip64=True) as stream:
            chunk = bytes(1 << 20)
            for _ in range(megabytes):
                stream.write(chunk)
    return out.getvalue()


def test_zip_bomb_posing_as_word_is_refused_before_unpacking() -> None:
    bomb = _zeros_member("word/document.xml", 300)
    assert len(bomb) < 2_000_000
    assert sniff(bomb, "invoice.docx") == DOCX
    with pytest.raises(ParseRefused) as refused:
        parse_bytes(bomb, "invoice.docx")
    assert str(refused.value) == (
        "invoice.docx looks like a zip bomb: it would unpack to 300 MiB, more than the 200 MiB read"
    )


def test_one_member_packed_over_a_hundred_to_one_is_a_bomb() -> None:
    bomb = _zeros_member("ppt/media/image1.png", 40, {"ppt/presentation.xml": "<p/>"})
    with pytest.raises(ParseRefused) as refused:
        parse_bytes(bomb, "deck.pptx", ParseLimits())
    assert str(refused.value).startswith(
        "deck.pptx looks like a zip bomb: ppt/media/image1.png unpacks "
    )
    assert str(refused.value).endswith("times larger than it is packed")


def test_file_over_the_size_limit_is_refused() -> None:
    with pytest.raises(
        ParseRefused, match=r"^big\.txt is 2,000 bytes; at most 1,000 bytes are read$"
    ):
        parse_bytes(b"x" * 2000, "big.txt", ParseLimits(max_file_bytes=1000))


def test_public_files_are_what_their_names_say() -> None:
    expected = {".pdf": PDF, ".docx": DOCX, ".pptx": PPTX, ".tif": TIFF, ".html": HTML}
    for path in sorted(DATA.iterdir()):
        if path.suffix in expected:
            assert sniff(path.read_bytes(), path.name) == expected[path.suffix], path.name


def test_a_scan_named_jpeg_is_read_as_one(tiny_image) -> None:
    scan = scan_image(book(2, 1)[0], dpi=100)
    assert sniff(image_bytes(scan, "JPEG", quality=80), "page.jpeg") == JPEG
