"""Text handling shared by ingestion and search: sentences, chunks and the lexical analyzer.

Everything here is pure and deterministic, so a re-ingested document yields the same chunk
ids and the same sparse term ids in every process.
"""

from __future__ import annotations

import hashlib
import re
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import snowballstemmer

from contracts.ingest import DocumentIn

STOP_WORDS: frozenset[str] = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren't",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "can't",
        "cannot",
        "could",
        "couldn't",
        "did",
        "didn't",
        "do",
        "does",
        "doesn't",
        "doing",
        "don't",
        "down",
        "during",
        "each",
        "either",
        "else",
        "ever",
        "few",
        "for",
        "from",
        "further",
        "had",
        "hadn't",
        "has",
        "hasn't",
        "have",
        "haven't",
        "having",
        "he",
        "he'd",
        "he'll",
        "he's",
        "her",
        "here",
        "here's",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "how's",
        "however",
        "i",
        "i'd",
        "i'll",
        "i'm",
        "i've",
        "if",
        "in",
        "into",
        "is",
        "isn't",
        "it",
        "it's",
        "its",
        "itself",
        "just",
        "let's",
        "may",
        "me",
        "might",
        "more",
        "most",
        "must",
        "mustn't",
        "my",
        "myself",
        "neither",
        "no",
        "nor",
        "not",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "shall",
        "shan't",
        "she",
        "she'd",
        "she'll",
        "she's",
        "should",
        "shouldn't",
        "so",
        "some",
        "such",
        "than",
        "that",
        "that's",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "there's",
        "these",
        "they",
        "they'd",
        "they'll",
        "they're",
        "they've",
        "this",
        "those",
        "through",
        "thus",
        "to",
        "too",
        "under",
        "until",
        "up",
        "upon",
        "us",
        "very",
        "was",
        "wasn't",
        "we",
        "we'd",
        "we'll",
        "we're",
        "we've",
        "were",
        "weren't",
        "what",
        "what's",
        "when",
        "when's",
        "where",
        "where's",
        "whether",
        "which",
        "while",
        "who",
        "who's",
        "whom",
        "whose",
        "why",
        "why's",
        "will",
        "with",
        "within",
        "without",
        "won't",
        "would",
        "wouldn't",
        "yet",
        "you",
        "you'd",
        "you'll",
        "you're",
        "you've",
        "your",
        "yours",
        "yourself",
        "yourselves",
    ]
)
"""English function words; a question's "what", "how" or "which" never helps a match."""

# --------------------------------------------------------------------------- sentences

_ABBREVIATIONS = frozenset(
    [
        "e.g",
        "i.e",
        "cf",
        "vs",
        "al",
        "fig",
        "figs",
        "eq",
        "eqs",
        "no",
        "nos",
        "vol",
        "approx",
        "ca",
        "dr",
        "mr",
        "mrs",
        "ms",
        "prof",
        "sr",
        "jr",
        "st",
        "mt",
        "inc",
        "ltd",
        "co",
        "corp",
        "dept",
        "univ",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "u.s",
        "u.k",
        "ph.d",
        "resp",
    ]
)
_BOUNDARY = re.compile(r"[.!?]+[\"'”’)\]]*\s+")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_WORD_BEFORE = re.compile(r"(\S+)$")


def _is_abbreviation(before: str) -> bool:
    """Whether the text before a '.' ends in a known abbreviation or an initial ("J.")."""
    match = _WORD_BEFORE.search(before)
    if match is None:
        return False
    word = match.group(1).lstrip("(\"'[").rstrip(".").lower()
    return word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())


def _split_block(block: str) -> Iterator[str]:
    text = " ".join(block.split())
    start = 0
    for match in _BOUNDARY.finditer(text):
        end = match.end()
        nxt = text[end : end + 1]
        punct_at = match.start()
        if not (nxt.isupper() or nxt.isdigit() or nxt in "\"'“‘([*-"):
            continue  # "e.g. the", "approx. 3" when lower-case: a sentence does not start here
        if text[punct_at] == "." and _is_abbreviation(text[start:punct_at]):
            continue
        sentence = text[start:end].strip()
        if sentence:
            yield sentence
        start = end
    tail = text[start:].strip()
    if tail:
        yield tail


def split_sentences(text: str) -> list[str]:
    """Sentences of a text; paragraphs and list items always end a sentence.

    Regex-based on purpose: no model, stable across versions. It keeps "e.g.", "Dr.",
    initials and decimals ("3.14") inside their sentence.
    """
    sentences: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        block: list[str] = []
        for line in paragraph.splitlines():
            if _LIST_ITEM.match(line) and block:
                sentences.extend(_split_block(" ".join(block)))
                block = []
            block.append(line)
        if block:
            sentences.extend(_split_block(" ".join(block)))
    return sentences


_MARKER = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")


def clean_sentence(sentence: str) -> str:
    """A sentence as an answer shows it: one line, and none of the source's own citation
    markers ("[12]"), which would point nowhere."""
    return " ".join(_MARKER.sub("", sentence).split())


_NON_SPACE = re.compile(r"\S+")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of `split_sentences(text)` in `text`, in order.

    A sentence is made of the text's next words (the splitter only joins lines and cuts
    between words), so `" ".join(text[a:b].split())` is the sentence; a sentence that does not
    line up that way (a splitter change) is skipped rather than mislocated.
    """
    words = [(m.group(), m.start(), m.end()) for m in _NON_SPACE.finditer(text)]
    spans: list[tuple[int, int]] = []
    at = 0
    for sentence in split_sentences(text):
        parts = sentence.split()
        taken = words[at : at + len(parts)]
        if len(taken) == len(parts) and all(
            w == p for (w, _, _), p in zip(taken, parts, strict=True)
        ):
            spans.append((taken[0][1], taken[-1][2]))
            at += len(parts)
    return spans


# --------------------------------------------------------------------------- chunks

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


# --------------------------------------------------------------------------- lexical analysis

_WORD = re.compile(r"\w+", re.UNICODE)


_local = threading.local()


def _stemmer() -> snowballstemmer.stemmer:
    """This thread's stemmer: a snowball stemmer keeps the word it works on in its own state,
    so two threads sharing one get each other's stems (ingestion extracts entities and
    sparse terms in threads side by side)."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = snowballstemmer.stemmer("english")
    return stemmer


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """Snowball English stem of a lower-case word; digits and mixed tokens pass unchanged."""
    return _stemmer().stemWord(word) if word.isalpha() else word


def analyze(text: str) -> list[str]:
    """Lower-cased, stop-word-free, stemmed word tokens ("COVID-19" -> "covid", "19")."""
    return [stem(token) for token in _WORD.findall(text.lower()) if token not in STOP_WORDS]


def term_id(term: str) -> int:
    """A stable 31-bit id for a term: the same in every process, unlike `hash()`."""
    digest = hashlib.blake2b(term.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF


SparseVec = tuple[list[int], list[float]]


class SparseEncoder:
    """BM25 term weights for Qdrant sparse vectors; Qdrant applies the IDF (`Modifier.IDF`).

    A document term weighs tf·(k1+1) / (tf + k1·(1 − b + b·len/avgdl)); a query term weighs 1,
    so the dot product Qdrant computes is the BM25 score.
    """

    def __init__(self, k1: float = 1.2, b: float = 0.75, avgdl: float = 120.0) -> None:
        self.k1 = k1
        self.b = b
        self.avgdl = avgdl

    def encode_document(self, text: str) -> SparseVec:
        terms = analyze(text)
        if not terms:
            return [], []
        norm = self.k1 * (1 - self.b + self.b * len(terms) / self.avgdl)
        weights: dict[int, float] = {}
        for term, tf in Counter(terms).items():
            tid = term_id(term)
            weights[tid] = weights.get(tid, 0.0) + tf * (self.k1 + 1) / (tf + norm)
        indices = sorted(weights)
        return indices, [weights[i] for i in indices]

    def encode_query(self, text: str) -> SparseVec:
        indices = sorted({term_id(term) for term in analyze(text)})
        return indices, [1.0] * len(indices)
