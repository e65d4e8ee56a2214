"""Chunks: a document split into sentence-aligned chunks under its Markdown headings, and
their ids.

Pure and deterministic, so a re-ingested document yields the same chunk ids in every process.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from contracts.ingest import DocumentIn
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


def _sections(text: str) -> Iterator[tuple[str, str]]:
    """(heading path, body) pairs; the heading path is "Top > Sub" for nested headings."""
    path: list[tuple[int, str]] = []
    body: list[str] = []
    in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        match = None if in_fence else _HEADING.match(line)
        if match is None:
            body.append(line)
            continue
        yield " > ".join(name for _, name in path), "\n".join(body)
        body = []
        level = len(match.group(1))
        path = [(lvl, name) for lvl, name in path if lvl < level] + [(level, match.group(2))]
    yield " > ".join(name for _, name in path), "\n".join(body)


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
    """Split a document into sentence-aligned chunks that never cross a Markdown heading."""
    if chunk_chars < 20:
        raise ValueError("chunk_chars must be at least 20")
    overlap_chars = max(0, min(overlap_chars, chunk_chars // 2))
    source = str(doc.metadata.get("source") or doc.metadata.get("url") or "")
    chunks: list[Chunk] = []
    for heading, body in _sections(doc.text):
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
                )
            )
    return chunks
