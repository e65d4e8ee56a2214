"""The text conventions every parser writes to, and the two kinds that are text already.

- Headings are Markdown lines (`# Title`, `## Sub`), so the chunker keeps heading paths.
- A table is its rows, one a line, cells joined by " | ".
- The lines of one paragraph are joined with spaces; a line that ends in a hyphen after a
  letter, before a lower-case letter, is joined without it ("exam-" + "ple": "example"),
  one that ends in another hyphen is joined keeping it ("Jean-" + "Paul": "Jean-Paul").
- Paragraphs (and headings, and tables) are separated by one blank line; so are pages.

A Markdown file's properties (`infra.documents.properties`) are what its front matter (a
YAML block between `---` lines at its start) says in plain `key: value` lines: `title`,
`author` (or `authors`, a list too), `date` (or `created`) and `modified` (or `updated`,
`lastmod`). No YAML library reads it: nothing else in it is looked at.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from contracts.ingest import PageSpan
from infra.documents.model import (
    MARKDOWN,
    ParsedDocument,
    ParseLimits,
    ParseRefused,
    display_name,
    stem,
)
from infra.documents.properties import file_properties

CELL_SEPARATOR = " | "
TITLE_CHARS = 300
"""A title longer than this is cut (at a word)."""
LINE_TITLE_CHARS = 120
"""A first line used as a title is cut to its first sentence, or a word before this."""

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]")
_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200b\u202f\u205f\u3000]+")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$")
_HYPHENS = "-\u2010\u00ad\x02"
"""A hyphen, Unicode's hyphen, a soft hyphen, and PDFium's mark for a hyphen it found at the
end of a line."""
_JOINED_HYPHEN = re.compile(r"(?<=[^\W\d_])(\x02)(?=([^\W\d_]))")
"""PDFium's mark inside a line: the hyphen of a line it has joined to the next already."""


def clean_line(line: str) -> str:
    """One line with control characters gone and runs of white space made one space."""
    return _SPACES.sub(" ", _CONTROL.sub("", line)).strip()


def _pdfium_hyphen(match: re.Match[str]) -> str:
    return "" if match.group(2).islower() else "-"


def join_lines(lines: Iterable[str]) -> str:
    """The lines of one paragraph as one line (see the module's conventions)."""
    out = ""
    for raw in lines:
        line = clean_line(_JOINED_HYPHEN.sub(_pdfium_hyphen, raw).replace("\x02", "-"))
        if not line:
            continue
        if not out:
            out = line
        elif out[-1] in _HYPHENS and len(out) > 1 and out[-2].isalpha() and line[0].islower():
            out = out[:-1] + line
        elif out[-1] in _HYPHENS and len(out) > 1 and not out[-2].isspace():
            out = out + line  # a hyphenated name or number ("Jean-" "Paul"): kept whole
        else:
            out = f"{out} {line}"
    return out.replace("\u00ad", "")


def paragraphs_of(text: str) -> list[str]:
    """Text whose paragraphs are separated by blank lines (OCR's output), each paragraph's
    lines joined."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n\n")
    blocks = re.split(r"\n\s*\n", text)
    return [p for p in (join_lines(block.split("\n")) for block in blocks) if p]


def table_row(cells: Sequence[str]) -> str:
    """One table row as a line: its cells' text (each on one line), " | " between them."""
    row = [clean_line(" ".join(cell.split())).replace(" | ", " / ") for cell in cells]
    while row and not row[-1]:
        row.pop()
    return CELL_SEPARATOR.join(row).strip() if any(row) else ""


def heading(level: int, text: str) -> str:
    text = clean_line(text.replace("\n", " ")).lstrip("#").strip()
    return f"{'#' * max(1, min(level, 6))} {text}" if text else ""


def blocks_text(blocks: Iterable[str]) -> str:
    """Paragraphs, headings and tables, a blank line between each two."""
    return "\n\n".join(b.strip("\n") for b in blocks if b and b.strip())


class PagedText:
    """A document's text built page by page, with each page's `PageSpan`."""

    def __init__(self, limits: ParseLimits, filename: str, label: str = "p. {}") -> None:
        self.limits = limits
        self.filename = filename
        self.label = label
        self.parts: list[str] = []
        self.length = 0
        self.pages: list[PageSpan] = []
        self._waiting: list[int] = []  # empty pages, whose start is the next text's

    def add(self, text: str) -> None:
        number = len(self.pages) + len(self._waiting) + 1
        text = text.strip("\n")
        if not text.strip():
            self._waiting.append(number)
            return
        if self.parts:
            self.parts.append("\n\n")
            self.length += 2
        self._settle(self.length)
        self.pages.append(
            PageSpan(number=number, start=self.length, label=self.label.format(number))
        )
        self.parts.append(text)
        self.length += len(text)
        check_length(self.length, self.limits, self.filename)

    def _settle(self, start: int) -> None:
        for number in self._waiting:
            self.pages.append(PageSpan(number=number, start=start, label=self.label.format(number)))
        self._waiting.clear()

    def finish(self) -> tuple[str, list[PageSpan]]:
        self._settle(self.length)
        self.pages.sort(key=lambda span: span.number)
        return "".join(self.parts), self.pages


def check_length(chars: int, limits: ParseLimits, filename: str) -> None:
    if chars > limits.max_chars:
        raise ParseRefused(
            f"{display_name(filename)} holds more than {limits.max_chars:,} characters of "
            "text, more than one document may hold; split it into smaller files"
        )


def first_heading(text: str) -> str:
    for line in text.splitlines():
        match = _HEADING.match(line)
        if match:
            return match.group(2).strip()
    return ""


def first_line(text: str) -> str:
    """The text's first line with a letter or digit; its first sentence if it is long."""
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if any(ch.isalnum() for ch in line):
            if len(line) <= LINE_TITLE_CHARS:
                return line
            end = line.find(". ", 0, LINE_TITLE_CHARS)
            if end > 0:
                return line[: end + 1]
            cut = line.rfind(" ", 0, LINE_TITLE_CHARS)
            return line[: cut if cut > 0 else LINE_TITLE_CHARS].rstrip(",;:") + "…"
    return ""


def short_title(title: str) -> str:
    title = clean_line(title)
    if len(title) <= TITLE_CHARS:
        return title
    cut = title.rfind(" ", 0, TITLE_CHARS)
    return title[: cut if cut > TITLE_CHARS // 2 else TITLE_CHARS].rstrip() + "…"


def choose_title(filename: str, *candidates: str) -> str:
    """The first candidate that has a letter or digit, else the file's stem."""
    for candidate in candidates:
        candidate = short_title(candidate or "")
        if any(ch.isalnum() for ch in candidate):
            return candidate
    return short_title(stem(filename))


def decode_text(data: bytes) -> str:
    """Text files' bytes: UTF-8 (a BOM dropped), or UTF-16 with its BOM; bad bytes replaced."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def parse_text(data: bytes, filename: str, media_type: str, limits: ParseLimits) -> ParsedDocument:
    """Markdown and plain text, as they are (line ends made `\\n`, control characters gone);
    the title is the first `# ` heading (Markdown) or the file's stem."""
    raw = decode_text(data).replace("\r\n", "\n").replace("\r", "\n")
    lines = [_SPACES.sub(" ", _CONTROL.sub("", line)).rstrip() for line in raw.split("\n")]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
    if not any(ch.isalnum() for ch in text):
        raise ParseRefused(f"{display_name(filename)} holds no text")
    check_length(len(text), limits, filename)
    title = first_heading(text) if media_type == MARKDOWN else ""
    stated = (lambda: front_matter(text)) if media_type == MARKDOWN else None
    return ParsedDocument(
        title=choose_title(filename, title),
        text=text,
        pages=[],
        media_type=media_type,
        properties=file_properties(media_type, stated),
    )


FRONT_MATTER_CHARS = 8192
"""Front matter is looked for in this much of a Markdown file's start."""
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
_FRONT_KEY = re.compile(r"^([A-Za-z_][\w-]*)[ \t]*:(?:[ \t]+(.*))?$")
_FRONT_ITEM = re.compile(r"^[ \t]+-[ \t]+(.+)$")
_FRONT_KEYS = {
    "title": "title",
    "author": "author",
    "authors": "author",
    "date": "created",
    "created": "created",
    "modified": "modified",
    "updated": "modified",
    "lastmod": "modified",
    "last_modified": "modified",
}


def front_matter(text: str) -> dict[str, Any]:
    """What a Markdown file's front matter says (see the module), raw; empty where it has
    none."""
    match = _FRONT_MATTER.match(text[:FRONT_MATTER_CHARS])
    if match is None:
        return {}
    found: dict[str, Any] = {}
    listing: list[str] | None = None  # the items of a key whose value is a block list
    for line in match.group(1).split("\n"):
        item = _FRONT_ITEM.match(line)
        if item is not None and listing is not None:
            listing.append(_scalar(item.group(1)))
            continue
        listing = None
        pair = _FRONT_KEY.match(line)
        if pair is None:
            continue
        key = _FRONT_KEYS.get(pair.group(1).lower())
        if key is None or key in found:
            continue
        value = (pair.group(2) or "").strip()
        if not value:
            listing = []
            found[key] = listing
        elif value.startswith("[") and value.endswith("]"):
            found[key] = [_scalar(part) for part in value[1:-1].split(",")]
        else:
            found[key] = _scalar(value)
    return {
        key: ", ".join(part for part in value if part) if isinstance(value, list) else value
        for key, value in found.items()
    }


def _scalar(value: str) -> str:
    """A YAML scalar's text: its quotes gone, or a trailing comment."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1].strip()
    return re.sub(r"[ \t]+#.*$", "", value).strip()
