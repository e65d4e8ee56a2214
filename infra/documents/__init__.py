"""Files as people keep them, made into documents: PDF (text layer, or scanned through OCR),
images, Word, PowerPoint, HTML, Markdown and text.

The interface the parse worker (`workers/parse`) and the producers use:

- `sniff(data, filename) -> str`: the media type the *bytes* say (magic numbers, a zip's
  members, markup), whatever the name claims; `ParseRefused` for a kind not read, an empty
  file, or a name whose supported suffix contradicts the bytes ("report.pdf is named .pdf
  but holds HTML").
- `SUPPORTED_SUFFIXES`: the file name endings `ragbus ingest DIR` picks up in a folder tree.
- `ParseLimits`: time, memory, pages, unpacked bytes, pixels.
- `parse_bytes(data, filename, limits) -> ParsedDocument`: in this process (tests, tools).
- `ParserPool(limits)`: parses in a child process under those limits; `await pool.parse(data,
  filename)`. A parser that overruns its time or memory, or crashes, is killed and replaced,
  and the call raises `ParserFailed`; a file at fault raises `ParseRefused` with the reason.

A `ParsedDocument` has a title, the text (headings as Markdown `#` lines, tables as rows of
cells joined by " | ", a paragraph's lines joined, a blank line between paragraphs), and its
`pages` (`contracts.ingest.PageSpan`, offsets into the text; "slide N" for PowerPoint; none
for HTML, Markdown, text and Word), `ocr_pages`, how many pages OCR read, and its
`properties`, what the file says about itself (its type, title, author, dates and page
count, clean and bounded: `properties`), which the parse worker keeps as the document's
metadata `file`.

Modules: `model` (the types), `sniff` (kinds, zip bombs), `text` (the text conventions;
Markdown and text), `pdf` and `pdf_layout` (pypdfium2), `ocr` (tesseract; image files),
`office` (python-docx, python-pptx), `html` (trafilatura), `properties` (a file's own
properties, normalised), `parse` (`parse_bytes`), `pool` (`ParserPool`). The libraries are
imported when a file of their kind is first parsed.
"""

from infra.documents.model import (
    SUPPORTED_SUFFIXES,
    ParsedDocument,
    ParseLimits,
    ParseRefused,
    ParserFailed,
)
from infra.documents.parse import parse_bytes
from infra.documents.pool import ParserPool
from infra.documents.sniff import sniff

__all__ = [
    "SUPPORTED_SUFFIXES",
    "ParseLimits",
    "ParseRefused",
    "ParsedDocument",
    "ParserFailed",
    "ParserPool",
    "parse_bytes",
    "sniff",
]
