"""Sentences: the regex sentence splitter, its character spans in a text, and a sentence as
an answer shows it.

Pure and deterministic: the same text splits the same way in every process.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

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
