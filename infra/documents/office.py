"""Word (.docx, python-docx) and PowerPoint (.pptx, python-pptx).

Word: the body's paragraphs and tables in their order (content controls opened), headings
from the paragraph styles (`Title` and `Heading 1` are `#`, `Heading 2` `##`, ...; a style
based on a heading style counts as that heading). No pages: Word files do not keep them.
Headers, footers, footnotes, comments and images are not read.

PowerPoint: one page per slide, labelled "slide N". A slide's title is a `## ` heading, then
its shapes' text (groups opened) and tables, top to bottom and left to right, each text
paragraph a paragraph; then the speaker's notes, as plain paragraphs under no heading of
their own (they are often the slide's text in full sentences, worth finding). Charts,
pictures and SmartArt are not read.

Both are zip files: `sniff.check_zip` refuses a zip bomb before either library opens it.
Their properties (`infra.documents.properties`) are their core properties' title, author
(`dc:creator`), created and modified; and a deck's slide count.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from infra.documents.model import (
    DOCX,
    PPTX,
    ParsedDocument,
    ParseLimits,
    ParseRefused,
    display_name,
)
from infra.documents.properties import file_properties
from infra.documents.sniff import check_zip
from infra.documents.text import (
    PagedText,
    blocks_text,
    check_length,
    choose_title,
    first_heading,
    first_line,
    heading,
    join_lines,
    table_row,
)

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_JUNK_TITLES = {"presentation", "powerpoint presentation", "document", "untitled"}
_MAX_STYLE_DEPTH = 10


def _core(package: Any) -> dict[str, Any]:
    """What a Word or PowerPoint file's core properties say (cleaned by `file_properties`)."""
    core = package.core_properties
    stated: dict[str, Any] = {}
    for key in ("title", "author", "created", "modified"):
        try:
            stated[key] = getattr(core, key)
        except Exception:  # one damaged property, not the others
            continue
    return stated


def _damaged(filename: str, kind: str, exc: Exception) -> ParseRefused:
    refusal = ParseRefused(
        f"{display_name(filename)} is a damaged {kind} file; ragbus cannot read it"
    )
    refusal.__cause__ = exc
    return refusal


def _heading_level(paragraph: Any) -> int:
    """0 for body text, else the paragraph's heading level (Title: 1)."""
    try:
        style = paragraph.style
    except (KeyError, ValueError, AttributeError):
        style = None
    for _ in range(_MAX_STYLE_DEPTH):
        if style is None:
            break
        name = (style.name or "").strip().lower()
        if name == "title":
            return 1
        if name.startswith("heading "):
            digits = name.removeprefix("heading ").strip()
            if digits.isdigit() and int(digits) >= 1:
                return min(int(digits), 6)
        style = style.base_style
    levels = paragraph._p.xpath("./w:pPr/w:outlineLvl/@w:val")
    if levels and str(levels[0]).isdigit() and int(levels[0]) < 9:
        return min(int(levels[0]) + 1, 6)
    return 0


def _cell_text(cell: Any) -> str:
    parts = [join_lines(p.text.splitlines()) for p in cell.paragraphs]
    for table in cell.tables:
        parts += [row.replace(" | ", "; ") for row in _docx_rows(table)]
    return " ".join(part for part in parts if part)


def _docx_rows(table: Any) -> list[str]:
    rows = []
    for row in table.rows:
        cells, seen = [], set()
        for cell in row.cells:
            if id(cell._tc) in seen:  # a merged cell appears once per grid column
                continue
            seen.add(id(cell._tc))
            cells.append(_cell_text(cell))
        line = table_row(cells)
        if line:
            rows.append(line)
    return rows


def _docx_blocks(container: Any, parent: Any) -> Iterator[tuple[int, str]]:
    """(heading level or 0, text) for each block of a body, in order."""
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    for child in container.iterchildren():
        if child.tag == f"{_W}p":
            paragraph = Paragraph(child, parent)
            text = join_lines(paragraph.text.splitlines())
            if text:
                yield _heading_level(paragraph), text
        elif child.tag == f"{_W}tbl":
            rows = _docx_rows(Table(child, parent))
            if rows:
                yield 0, "\n".join(rows)
        elif child.tag in (f"{_W}sdt", f"{_W}customXml"):
            for inner in child.iterchildren(f"{_W}sdtContent"):
                yield from _docx_blocks(inner, parent)
            if child.tag == f"{_W}customXml":
                yield from _docx_blocks(child, parent)


def parse_docx(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    import docx

    check_zip(data, filename, limits)
    try:
        document = docx.Document(io.BytesIO(data))
        blocks = []
        title_style = ""
        chars = 0
        for level, text in _docx_blocks(document.element.body, document._body):
            blocks.append(heading(level, text) if level else text)
            if level == 1 and not title_style:
                title_style = text
            chars += len(text) + 2
            check_length(chars, limits, filename)
        core_title = document.core_properties.title or ""
    except ParseRefused:
        raise
    except Exception as exc:  # python-docx and lxml raise many kinds on a broken package
        raise _damaged(filename, "Word", exc) from exc
    text = blocks_text(blocks)
    if not text.strip():
        raise ParseRefused(f"{display_name(filename)} holds no text")
    if core_title.strip().lower() in _JUNK_TITLES:
        core_title = ""
    title = choose_title(filename, core_title, title_style, first_heading(text), first_line(text))
    properties = file_properties(DOCX, lambda: _core(document))
    return ParsedDocument(title=title, text=text, pages=[], media_type=DOCX, properties=properties)


def _position(shape: Any) -> tuple[int, int]:
    try:
        return int(shape.top or 0), int(shape.left or 0)
    except (AttributeError, ValueError, TypeError, KeyError):
        return 0, 0


def _shape_blocks(shapes: Any, skip: Any) -> Iterator[str]:
    for shape in sorted(shapes, key=_position):
        if skip is not None and shape.shape_id == skip.shape_id:
            continue
        if getattr(shape, "shape_type", None) == 6:  # MSO_SHAPE_TYPE.GROUP
            yield from _shape_blocks(shape.shapes, None)
        elif getattr(shape, "has_table", False) and shape.has_table:
            rows = [table_row([cell.text for cell in row.cells]) for row in shape.table.rows]
            yield "\n".join(row for row in rows if row)
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            for paragraph in shape.text_frame.paragraphs:
                yield join_lines(paragraph.text.replace("\v", "\n").splitlines())


def _slide_text(slide: Any) -> str:
    title_shape = slide.shapes.title
    title = join_lines((title_shape.text or "").splitlines()) if title_shape is not None else ""
    blocks = [heading(2, title)] if title else []
    blocks += _shape_blocks(slide.shapes, title_shape)
    if slide.has_notes_slide:
        frame = slide.notes_slide.notes_text_frame
        if frame is not None:
            blocks += [
                join_lines(p.text.replace("\v", "\n").splitlines()) for p in frame.paragraphs
            ]
    return blocks_text(blocks)


def parse_pptx(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    import pptx

    check_zip(data, filename, limits)
    name = display_name(filename)
    try:
        deck = pptx.Presentation(io.BytesIO(data))
        slides = deck.slides
        count = len(slides)
    except Exception as exc:  # python-pptx and lxml raise many kinds on a broken package
        raise _damaged(filename, "PowerPoint", exc) from exc
    if count == 0:
        raise ParseRefused(f"{name} has no slides")
    if count > limits.max_pages:
        raise ParseRefused(
            f"{name} has {count:,} slides; at most {limits.max_pages:,} are read (RAGBUS_MAX_PAGES)"
        )
    paged = PagedText(limits, filename, label="slide {}")
    try:
        for slide in slides:
            paged.add(_slide_text(slide))
        core_title = deck.core_properties.title or ""
    except ParseRefused:
        raise
    except Exception as exc:
        raise _damaged(filename, "PowerPoint", exc) from exc
    text, pages = paged.finish()
    if not text.strip():
        raise ParseRefused(f"{name} holds no text")
    if core_title.strip().lower() in _JUNK_TITLES:
        core_title = ""
    title = choose_title(filename, core_title, first_heading(text), first_line(text))
    properties = file_properties(PPTX, lambda: _core(deck), pages=count)
    return ParsedDocument(
        title=title, text=text, pages=pages, media_type=PPTX, properties=properties
    )
