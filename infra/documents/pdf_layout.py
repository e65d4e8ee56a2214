"""A PDF page's text layer as lines with their place and size, and lines made into
paragraphs and headings (PDFium reads the characters; it does no layout analysis).

Lines are PDFium's own (it breaks the text where the baseline moves). A line starts a new
paragraph when the gap above it is clearly more than the usual line pitch, when it lies above
the previous one (a new column), when it is indented under a line that ended a sentence, when
the previous line ended a sentence well short of the paragraph's right edge, or when the size
of the type changes. A line set clearly larger than the document's body text is a heading;
the largest heading size is `#`, the next `##`, and so on.
"""

from __future__ import annotations

import ctypes
import itertools
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from infra.documents.text import heading, join_lines

HEADING_RATIO = 1.15
"""Type this much larger than the body's is a heading."""
HEADING_CHARS = 150
PARAGRAPH_GAP = 1.4
"""A gap this many times the usual line pitch separates paragraphs."""
_SENTENCE_END = tuple(".!?:;\"'”’)")


@dataclass
class Line:
    text: str
    x0: float  # left edge, in the page's displayed orientation
    x1: float  # right edge
    top_y: float  # the first character's baseline (y grows upwards)
    end_y: float  # the last character's baseline
    size: float  # the type's size, in points

    @property
    def letters(self) -> int:
        return sum(ch.isalpha() for ch in self.text)


def _oriented(rotation: int, x: float, y: float) -> tuple[float, float]:
    """A point of the page's space as the page is shown (its /Rotate applied)."""
    if rotation == 90:
        return y, -x
    if rotation == 180:
        return -x, -y
    if rotation == 270:
        return -y, x
    return x, y


def page_lines(textpage: Any, rotation: int) -> list[Line]:
    """The text layer of one page as lines (PDFium's raw API: one call per character)."""
    import pypdfium2.raw as pdfium_c

    raw = textpage.raw
    count = pdfium_c.FPDFText_CountChars(raw)
    x, y = ctypes.c_double(), ctypes.c_double()
    left, right = ctypes.c_double(), ctypes.c_double()
    bottom, top = ctypes.c_double(), ctypes.c_double()

    def origin(i: int) -> tuple[float, float]:
        pdfium_c.FPDFText_GetCharOrigin(raw, i, ctypes.byref(x), ctypes.byref(y))
        return _oriented(rotation, x.value, y.value)

    def box_x(i: int) -> tuple[float, float]:
        pdfium_c.FPDFText_GetCharBox(
            raw, i, ctypes.byref(left), ctypes.byref(right), ctypes.byref(bottom), ctypes.byref(top)
        )
        xs = [
            _oriented(rotation, px, py)[0]
            for px in (left.value, right.value)
            for py in (bottom.value, top.value)
        ]
        return min(xs), max(xs)

    lines: list[Line] = []
    chars: list[str] = []
    placed: list[int] = []  # indices of the line's characters that are on the page

    def close() -> None:
        text = "".join(chars)
        if placed and text.strip():
            first, last = placed[0], placed[-1]
            x0 = box_x(first)[0]
            x1 = box_x(last)[1]
            sample = placed[:: max(1, len(placed) // 8)][:8]
            sizes = [pdfium_c.FPDFText_GetFontSize(raw, i) for i in sample]
            lines.append(
                Line(text, x0, x1, origin(first)[1], origin(last)[1], statistics.median(sizes))
            )
        chars.clear()
        placed.clear()

    for i in range(count):
        code = pdfium_c.FPDFText_GetUnicode(raw, i)
        if code in (10, 13):  # PDFium's line break (CR LF), or a break in the text itself
            close()
            continue
        if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            continue
        ch = chr(code)
        chars.append(ch)
        if not ch.isspace() and pdfium_c.FPDFText_IsGenerated(raw, i) != 1:
            placed.append(i)
    close()
    return lines


def body_size(pages: Sequence[Sequence[Line]]) -> float:
    """The size most of the document's letters are set in."""
    weights: Counter[float] = Counter()
    for lines in pages:
        for line in lines:
            weights[round(line.size * 2) / 2] += line.letters
    return weights.most_common(1)[0][0] if weights else 0.0


def is_heading(line: Line, body: float) -> bool:
    return (
        body > 0
        and line.size >= body * HEADING_RATIO
        and len(line.text) <= HEADING_CHARS
        and line.letters >= 2
    )


def heading_levels(pages: Sequence[Sequence[Line]], body: float) -> dict[float, int]:
    """Each heading size's Markdown level: the largest 1, the next 2, ... (at most 6)."""
    sizes = {
        round(line.size * 2) / 2 for lines in pages for line in lines if is_heading(line, body)
    }
    return {size: min(level, 6) for level, size in enumerate(sorted(sizes, reverse=True), 1)}


def _usual_pitch(lines: Sequence[Line]) -> float:
    pitches = [
        a.end_y - b.top_y
        for a, b in itertools.pairwise(lines)
        if a.end_y - b.top_y > 0 and abs(a.size - b.size) < 0.5
    ]
    return statistics.median(pitches) if pitches else 0.0


def page_blocks(lines: Sequence[Line], body: float, levels: dict[float, int]) -> list[str]:
    """One page's lines as paragraphs and headings, in order."""
    blocks: list[str] = []
    current: list[Line] = []
    current_heading = False
    usual = _usual_pitch(lines)

    def flush() -> None:
        if current:
            text = join_lines(line.text for line in current)
            if current_heading:
                level = levels.get(round(current[0].size * 2) / 2, 1)
                blocks.append(heading(level, text))
            else:
                blocks.append(text)
        current.clear()

    for line in lines:
        head = is_heading(line, body)
        if current and (head != current_heading or _breaks(current, line, usual)):
            flush()
        if not current:
            current_heading = head
        current.append(line)
    flush()
    return [b for b in blocks if b]


def _breaks(paragraph: Sequence[Line], line: Line, usual: float) -> bool:
    """Whether `line` starts a new paragraph after `paragraph`'s lines."""
    prev = paragraph[-1]
    pitch = prev.end_y - line.top_y
    size = max(prev.size, line.size, 1.0)
    if pitch <= -0.5 * size:  # above the previous line: a new column or a new box
        return True
    if abs(prev.size - line.size) > max(1.0, 0.12 * size):
        return True
    expected = usual if usual > 0 else 1.25 * size
    if pitch > PARAGRAPH_GAP * expected and pitch > 0.2 * size:
        return True
    ended = prev.text.rstrip().endswith(_SENTENCE_END)
    if ended and line.x0 - prev.x0 > 0.8 * size:
        return True  # an indented first line
    if ended and len(paragraph) >= 2:
        right = max(p.x1 for p in paragraph)
        width = right - min(p.x0 for p in paragraph)
        if width > 0 and right - prev.x1 > 0.15 * width:
            return True  # the previous line ended the paragraph short of the edge
    return False
