"""The lexical analyzer and its BM25 sparse vectors: stop words, stems, tokens, term ids.

Pure and deterministic, so a text yields the same sparse term ids in every process.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import Counter
from functools import lru_cache

import snowballstemmer

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
