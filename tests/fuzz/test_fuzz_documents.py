"""Hypothesis-made files for the document parsers: arbitrary bytes under every supported name,
and valid small PDF, Word, PowerPoint and PNG files with bytes overwritten, cut short or
inserted. `parse_bytes` (in this process, under tight limits) may only answer with a document
the ingest contract accepts, `ParseRefused` or `ParserFailed`: never another exception.

No stack is started: these run with the unit tests' speed (`make test`), and `make soak`
tries more (`RAGBUS_FUZZ_SCALE`); the same cases on every run, so failures reproduce."""

from __future__ import annotations

import functools
import io
import zipfile
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.ingest import DocumentIn
from infra.documents import (
    SUPPORTED_SUFFIXES,
    ParsedDocument,
    ParseLimits,
    ParseRefused,
    ParserFailed,
    parse_bytes,
)
from tests.fuzz.conftest import SCALE
from tests.unit.test_documents_support import (
    Page,
    docx_file,
    image_bytes,
    pptx_file,
    scan_image,
    text_pdf,
)

EXAMPLES = 60 * SCALE
LIMITS = ParseLimits(
    timeout_s=20.0,
    max_pages=5,
    max_unpacked_bytes=4 * 2**20,
    max_pixels=2_000_000,
    max_file_bytes=2 * 2**20,
    ocr_workers=1,
)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NAMES = [*sorted(f"file{suffix}" for suffix in SUPPORTED_SUFFIXES), "file", "file.bin"]


@dataclass(frozen=True)
class Seed:
    name: str
    data: bytes


@functools.cache
def seeds() -> tuple[Seed, ...]:
    page = Page("Harbour", ["The river carried water to a quiet harbour.", "Merchants traded."])
    from PIL import Image

    small = scan_image(Page("", ["Quiet harbour"]), dpi=60).crop((0, 0, 500, 160))
    assert isinstance(small, Image.Image)
    return (
        Seed("seed.pdf", text_pdf([page])),
        Seed("seed.docx", docx_file([page], table=[["a", "b"], ["c", "d"]])),
        Seed("seed.pptx", pptx_file([page], notes=["Notes."])),
        Seed("seed.png", image_bytes(small, "PNG")),
    )


def check(data: bytes, name: str) -> None:
    """The only outcomes allowed, and a document the ingest contract takes."""
    try:
        doc = parse_bytes(data, name, LIMITS)
    except (ParseRefused, ParserFailed) as exc:
        message = str(exc)
        assert message and "\n" not in message, message
        return
    assert isinstance(doc, ParsedDocument)
    assert doc.text.strip() and doc.title.strip()
    assert all(span.start <= len(doc.text) for span in doc.pages)
    assert [span.number for span in doc.pages] == list(range(1, len(doc.pages) + 1))
    DocumentIn(id="fuzz", title=doc.title, text=doc.text, pages=doc.pages)


@SETTINGS
@given(data=st.binary(max_size=4096), name=st.sampled_from(NAMES))
def test_arbitrary_bytes_under_every_name(data: bytes, name: str) -> None:
    check(data, name)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    seed = draw(st.sampled_from(seeds()))
    data = bytearray(seed.data)
    kind = draw(st.sampled_from(["overwrite", "truncate", "insert", "all"]))
    if kind in ("overwrite", "all"):
        for _ in range(draw(st.integers(1, 16))):
            at = draw(st.integers(0, len(data) - 1))
            data[at] = draw(st.integers(0, 255))
    if kind in ("insert", "all"):
        at = draw(st.integers(0, len(data)))
        data[at:at] = draw(st.binary(min_size=1, max_size=256))
    if kind in ("truncate", "all"):
        data = data[: draw(st.integers(0, len(data)))]
    name = draw(st.sampled_from([seed.name, "mutant", "mutant.bin"]))
    return name, bytes(data)


@SETTINGS
@given(case=mutated())
def test_mutated_valid_files(case: tuple[str, bytes]) -> None:
    name, data = case
    check(data, name)


XML_MEMBERS = {"seed.docx": "word/document.xml", "seed.pptx": "ppt/slides/slide1.xml"}


@st.composite
def mutated_xml(draw: st.DrawFn) -> tuple[str, bytes]:
    """A Word or PowerPoint file whose main XML is damaged inside an intact zip (a damaged
    zip is refused before any XML is read: its members' checksums fail)."""
    seed = draw(st.sampled_from([s for s in seeds() if s.name in XML_MEMBERS]))
    member = XML_MEMBERS[seed.name]
    with zipfile.ZipFile(io.BytesIO(seed.data)) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    xml = bytearray(members[member])
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(xml) - 1))
        if draw(st.booleans()):
            xml[at] = draw(st.sampled_from(b"<>/=\"' &;:x0#\x00\xff"))
        else:
            xml[at:at] = draw(
                st.sampled_from(
                    [b"<w:p>", b"</w:t>", b"<a:tbl/>", b'<w:pStyle w:val="Heading 9"/>', b"&x;"]
                )
            )
    if draw(st.booleans()):
        xml = xml[: draw(st.integers(0, len(xml)))]
    members[member] = bytes(xml)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, body in members.items():
            archive.writestr(name, body)
    return seed.name, out.getvalue()


@SETTINGS
@given(case=mutated_xml())
def test_office_files_with_damaged_xml(case: tuple[str, bytes]) -> None:
    name, data = case
    check(data, name)


def test_the_seeds_themselves_parse() -> None:
    for seed in seeds():
        doc = parse_bytes(seed.data, seed.name, LIMITS)
        assert "harbour" in doc.text.lower(), seed.name
