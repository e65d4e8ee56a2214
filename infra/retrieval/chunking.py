"""Chunks: a document split into sentence-aligned chunks under its Markdown headings, and
their ids.

A parsed file's document (`DocumentIn.pages`) is chunked page by page: no chunk crosses a
page, so each knows the page that holds its text, while the heading path runs on across
pages (a heading on page 2 still heads page 3's text until the next heading). A document
without pages is chunked as one page with no number, exactly as before pages existed.

Pure and deterministic, so a re-ingested document yields the same chunk ids in every process.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.ingest import DocumentIn
from contracts.limits import MAX_PAGE_LABEL_CHARS, MAX_TITLE_CHARS
from infra.retrieval.sentences import split_sentences

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


@dataclass(frozen=True)
class Chunk:
    chunk_id: str
    document_id: str
    namespace: str
    title: str
    source: str
    index: int
    text: str
    heading: str = ""
    page: int | None = None
    """The page (slide) of the parsed file that holds the text; None for text sent as text."""
    page_label: str = ""
    """How a person names that page: "p. 3", "slide 2" (`PageSpan.named`)."""

    @property
    def embedding_text(self) -> str:
        """What the encoders see: the title and heading give a short passage its context."""
        context = " — ".join(part for part in (self.title, self.heading) if part)
        return f"{context}\n{self.text}" if context else self.text

    @property
    def text_offset(self) -> int:
        """Where `text` starts in `embedding_text` (which ends with it)."""
        return len(self.embedding_text) - len(self.text)


def chunk_id_for(namespace: str, document_id: str, index: int) -> str:
    """Stable across re-ingestion, and a UUID because Qdrant wants UUID or integer point ids."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{document_id}#{index}"))


def placed(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Where a stored chunk (a store's payload: `page`, `page_label`, `heading`) sits in its
    document, as `contracts.models.RetrievedChunk` carries it: its page, the page's label and
    its heading path (`section`), each left out when the payload has none (a text document's
    chunk, or one stored before pages existed)."""
    found: dict[str, Any] = {}
    page = payload.get("page")
    if isinstance(page, int | float) and not isinstance(page, bool) and page >= 1:
        found["page"] = int(page)
        if label := str(payload.get("page_label") or ""):
            found["page_label"] = label[:MAX_PAGE_LABEL_CHARS]
    if heading := str(payload.get("heading") or ""):
        found["section"] = heading[:MAX_TITLE_CHARS]
    return found


@dataclass
class _Headings:
    """Where a walk over a document's lines stands: the open headings (level, name) and
    whether it is inside a code fence. Kept from one page's text to the next."""

    path: list[tuple[int, str]] = field(default_factory=list)
    in_fence: bool = False

    def named(self) -> str:
        return " > ".join(name for _, name in self.path)


def _sections(text: str, at: _Headings | None = None) -> Iterator[tuple[str, str]]:
    """(heading path, body) pairs; the heading path is "Top > Sub" for nested headings.
    `at` is the state the text starts in (the previous page's headings), and is left as
    the text ends."""
    at = _Headings() if at is None else at
    body: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            at.in_fence = not at.in_fence
        match = None if at.in_fence else _HEADING.match(line)
        if match is None:
            body.append(line)
            continue
        yield at.named(), "\n".join(body)
        body = []
        level = len(match.group(1))
        at.path = [(lvl, name) for lvl, name in at.path if lvl < level] + [(level, match.group(2))]
    yield at.named(), "\n".join(body)


def _pages(doc: DocumentIn) -> Iterator[tuple[str, int | None, str]]:
    """(text, page number, page label) for each page's slice of the text, in order; the
    whole text with no page for a document without pages (and text before the first page's
    start, if any, with none)."""
    if not doc.pages:
        yield doc.text, None, ""
        return
    first = min(doc.pages[0].start, len(doc.text))
    if doc.text[:first].strip():
        yield doc.text[:first], None, ""
    for n, span in enumerate(doc.pages):
        end = doc.pages[n + 1].start if n + 1 < len(doc.pages) else len(doc.text)
        start = min(span.start, len(doc.text))
        if end > start:
            yield doc.text[start:end], span.number, span.named()


def _bounded(sentences: list[str], limit: int) -> Iterator[str]:
    """Sentences no longer than `limit`: an over-long one is cut at whitespace (or hard)."""
    for sentence in sentences:
        while len(sentence) > limit:
            cut = sentence.rfind(" ", 0, limit + 1)
            cut = cut if cut > limit // 2 else limit
            yield sentence[:cut].rstrip()
            sentence = sentence[cut:].lstrip()
        if sentence:
            yield sentence


def _pack(sentences: list[str], chunk_chars: int, overlap_chars: int) -> Iterator[str]:
    """Greedy packing of whole sentences; each chunk starts with the previous one's tail.

    The overlap is taken in whole sentences and counts against the size bound, so no chunk
    is ever longer than `chunk_chars`.
    """
    current: list[str] = []
    size = 0
    fresh = 0  # sentences in `current` that no earlier chunk has emitted
    for sentence in _bounded(sentences, chunk_chars):
        extra = len(sentence) + (1 if current else 0)
        if current and size + extra > chunk_chars:
            yield " ".join(current)
            carry: list[str] = []
            carried = 0
            for previous in reversed(current):
                if carried + len(previous) + 1 > overlap_chars:
                    break
                carry.insert(0, previous)
                carried += len(previous) + 1
            while carry and carried + len(sentence) > chunk_chars:
                carried -= len(carry.pop(0)) + 1
            current, size, fresh = carry, max(carried - 1, 0), 0
            extra = len(sentence) + (1 if current else 0)
        current.append(sentence)
        size += extra
        fresh += 1
    if current and fresh:
        yield " ".join(current)


def chunk_document(
    doc: DocumentIn, chunk_chars: int = 800, overlap_chars: int = 120
) -> list[Chunk]:
    """Split a document into sentence-aligned chunks that never cross a Markdown heading,
    nor a page of a parsed file."""
    if chunk_chars < 20:
        raise ValueError("chunk_chars must be at least 20")
    overlap_chars = max(0, min(overlap_chars, chunk_chars // 2))
    source = str(doc.metadata.get("source") or doc.metadata.get("url") or "")
    chunks: list[Chunk] = []
    headings = _Headings()
    for text_of_page, page, page_label in _pages(doc):
        for heading, body in _sections(text_of_page, headings):
            for text in _pack(split_sentences(body), chunk_chars, overlap_chars):
                index = len(chunks)
                chunks.append(
                    Chunk(
                        chunk_id=chunk_id_for(doc.namespace, doc.id, index),
                        document_id=doc.id,
                        namespace=doc.namespace,
                        title=doc.title,
                        source=source,
                        index=index,
                        text=text,
                        heading=heading,
                        page=page,
                        page_label=page_label,
                    )
                )
    return chunks
