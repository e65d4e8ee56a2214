"""Sniffing hostile bytes takes time linear in what it reads and reads within bounds: issue
54's catastrophic regular expression, and a zip's table of contents read whole before any
cap."""

from __future__ import annotations

import io
import signal
import struct
import time
import tracemalloc
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from infra.documents import ParseRefused, parse_bytes, sniff
from infra.documents.model import DOCX, HTML, PPTX, TEXT
from infra.documents.sniff import sniff_file
from infra.documents.zipdir import MAX_DIRECTORY_BYTES, MAX_MEMBERS, zip_entries
from tests.unit.test_documents_support import zip_of_entries


@contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail (rather than hang the suite) when the block outlives `seconds`: `re` checks for
    signals while it matches, so an alarm stops a runaway match too."""

    def expired(*_: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("name", ["a.txt", "page.html", "upload"])
def test_comments_before_a_page_take_linear_time(name: str) -> None:
    # 40 empty comments then junk: the old pattern's backtracking doubled every comment
    with within(5):
        started = time.perf_counter()
        for count in (40, 4_000):
            result = sniff(b"<!---->" * count + b"x", name)
            assert result in (TEXT, HTML)
        assert time.perf_counter() - started < 1.0


def test_comments_then_a_page_are_still_a_page() -> None:
    page = b'<?xml version="1.0"?>\n<!-- one -->\n<!--two-->  <!DOCTYPE html><p>x</p>'
    assert sniff(page, "notes.bin") == HTML
    assert sniff(b"<!-- never closed <html>", "notes.bin") == TEXT
    assert sniff(b"<!-- a --> words <html>", "x") == TEXT
    assert sniff(b"<?XML nothing closes", "y") == TEXT
    with pytest.raises(ParseRefused, match=r"is named \.txt but holds HTML"):
        sniff(b"<!--c--><!--d-->\n<HTML><body>x</body></HTML>", "a.txt")


def test_the_hand_made_zip_reads_as_a_zip() -> None:
    small = zip_of_entries(3)
    with zipfile.ZipFile(io.BytesIO(small)) as archive:
        assert len(archive.infolist()) == 3
    assert sniff(small, "letter.docx") == DOCX
    entries = zip_entries(lambda o, n: small[o : o + n], len(small), "letter.docx")
    assert [e.name for e in entries] == ["word/document.xml", "1", "2"]


def test_a_zip_of_too_many_entries_is_refused_from_its_end_record() -> None:
    bomb = zip_of_entries(MAX_MEMBERS + 1)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(ParseRefused, match=r"zip bomb: it holds 20,001 files"):
            sniff(bomb, "invoice.docx")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 0.5
    assert peak < 5 * MAX_DIRECTORY_BYTES  # the directory's bytes, never an object an entry


def test_an_end_record_that_lies_about_its_count_is_caught_while_walking() -> None:
    bomb = zip_of_entries(MAX_MEMBERS + 50, claimed=10)
    with pytest.raises(ParseRefused, match=r"holds more than 20,000 files"):
        sniff(bomb, "deck.docx")


def test_a_directory_too_large_is_refused_before_it_is_read() -> None:
    archive = zip_of_entries(2)
    end = archive[-22:]
    fields = list(struct.unpack("<4s4H2LH", end))
    fields[5] = MAX_DIRECTORY_BYTES + 1  # its size, as the end record claims it
    lying = archive[:-22] + struct.pack("<4s4H2LH", *fields)
    reads: list[tuple[int, int]] = []

    def read_at(offset: int, size: int) -> bytes:
        reads.append((offset, size))
        return lying[offset : offset + size]

    with pytest.raises(ParseRefused, match=r"table of contents is 4.0 MiB"):
        zip_entries(read_at, len(lying), "x.docx")
    assert len(reads) == 1  # the end record's search, and nothing after it


def test_the_parse_refuses_the_same_bombs() -> None:
    with pytest.raises(ParseRefused, match=r"zip bomb"):
        parse_bytes(zip_of_entries(MAX_MEMBERS + 1), "invoice.docx")


def test_zip64_sizes_are_read_from_the_extra_field() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("ppt/presentation.xml", "<p/>")
        with archive.open("ppt/media/big.bin", "w", force_zip64=True) as stream:
            for _ in range(3):
                stream.write(bytes(1 << 20))
    data = out.getvalue()
    entries = {e.name: e for e in zip_entries(lambda o, n: data[o : o + n], len(data), "d")}
    assert entries["ppt/media/big.bin"].unpacked == 3 << 20
    assert entries["ppt/media/big.bin"].packed < 1 << 20
    assert sniff(data, "deck.pptx") == PPTX


def test_damaged_tables_of_contents_are_refused_as_damaged() -> None:
    good = zip_of_entries(3)
    torn = good.replace(b"PK\x01\x02", b"PK\x00\x00", 1)  # an entry that is no entry
    for broken in (good[:-30], torn, b"PK\x03\x04" + good[-22:]):
        with pytest.raises(ParseRefused, match="damaged zip archive"):
            sniff(broken, "x.docx")


class CountingFile(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        self.bytes_read += len(chunk)
        return chunk


def test_an_upload_is_sniffed_without_being_read_whole() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("word/document.xml", "<w/>")
        archive.writestr("word/media/filler.bin", bytes(8 << 20))
    file = CountingFile(out.getvalue())
    assert sniff_file(file, "letter.docx") == DOCX
    assert file.bytes_read < 256 * 1024
    assert file.tell() == 0  # left where the upload reads it from
    text = CountingFile(b"plain words " * 1_000_000)
    assert sniff_file(text, "notes.txt") == TEXT
    assert text.bytes_read <= 64 * 1024
