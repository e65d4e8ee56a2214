"""Web pages: their main content by trafilatura, as Markdown; navigation, footers, cookie
banners and comments are left out. A page trafilatura finds no content in is read as the
plain text of its body (scripts, styles, navigation, header and footer dropped). The title is
trafilatura's (the page's metadata, else its `<title>`).

Its properties (`infra.documents.properties`): its `<title>` (else its `og:title` or Dublin
Core title), and the author and dates its `<meta>` elements state (`author`,
`article:published_time`, `dcterms.modified`, `http-equiv="last-modified"`, ...: `_META`),
each the first of its names in `_META`'s order."""

from __future__ import annotations

import copy
import itertools
import re
from typing import Any

from infra.documents.model import HTML, ParsedDocument, ParseLimits, ParseRefused, display_name
from infra.documents.properties import file_properties, first_date, first_text
from infra.documents.text import (
    check_length,
    choose_title,
    clean_line,
    decode_text,
    first_heading,
    first_line,
    join_lines,
    paragraphs_of,
    table_row,
)

_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
_DROPPED = ("script", "style", "noscript", "nav", "header", "footer", "aside", "form", "template")
_META: dict[str, tuple[str, ...]] = {
    "title": ("og:title", "dcterms.title", "dc.title"),
    "author": ("author", "dc.creator", "dcterms.creator", "citation_author", "parsely-author"),
    "created": (
        "article:published_time",
        "og:published_time",
        "datepublished",
        "dcterms.created",
        "dc.date.created",
        "dcterms.issued",
        "dc.date.issued",
        "citation_publication_date",
        "dcterms.date",
        "dc.date",
        "date",
        "pubdate",
        "publishdate",
        "publish-date",
        "publication_date",
        "parsely-pub-date",
        "sailthru.date",
    ),
    "modified": (
        "article:modified_time",
        "og:updated_time",
        "datemodified",
        "dcterms.modified",
        "dc.date.modified",
        "last-modified",
        "lastmod",
    ),
}
"""Where a page states its author and dates: `<meta>` names (`name`, `property`, `itemprop`
or `http-equiv`, compared lower-cased), each property's in order of preference."""
MAX_META = 1000
"""`<meta>` elements looked at."""


def markdown_text(markdown: str) -> str:
    """trafilatura's Markdown in the house conventions: a paragraph's lines joined, tables
    as " | " rows (no rule lines), code blocks kept as they are."""
    out: list[str] = []
    paragraph: list[str] = []
    in_fence = False

    def flush() -> None:
        if paragraph:
            out.append(join_lines(paragraph))
            paragraph.clear()

    for raw in markdown.replace("\r\n", "\n").split("\n"):
        line = raw.rstrip()
        if line.lstrip().startswith("```"):
            flush()
            in_fence = not in_fence
            out.append(line)
            continue
        if in_fence:
            out.append(line)
            continue
        if not line.strip():
            flush()
            if out and out[-1] != "":
                out.append("")
            continue
        if line.lstrip().startswith("|"):
            flush()
            if not _TABLE_RULE.match(line):
                cells = line.strip().strip("|").split("|")
                row = table_row([cell.strip() for cell in cells])
                if row:
                    out.append(row)
            continue
        if _HEADING.match(line) or _LIST_ITEM.match(line):
            flush()
        paragraph.append(line)
        if _HEADING.match(line):
            flush()
    flush()
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n")


def _body_text(data: bytes) -> str:
    """The plain text of a page's body, its block elements as paragraphs."""
    import lxml.html

    try:
        root = lxml.html.document_fromstring(data)
    except (ValueError, TypeError, lxml.etree.ParserError):
        return "\n\n".join(paragraphs_of(decode_text(data)))
    for element in root.xpath("|".join(f"//{tag}" for tag in _DROPPED)):
        element.drop_tree()
    blocks = []
    body = root.find("body")
    for element in (body if body is not None else root).iter():
        if element.tag in ("p", "div", "li", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6", "br"):
            element.tail = "\n\n" + (element.tail or "")
    text = (body if body is not None else root).text_content()
    for block in re.split(r"\n\s*\n", text):
        line = clean_line(" ".join(block.split()))
        if line:
            blocks.append(line)
    return "\n\n".join(blocks)


def _meta(tree: Any) -> dict[str, list[str]]:
    """The page's `<meta>` contents by lower-cased name, in page order."""
    found: dict[str, list[str]] = {}
    for element in itertools.islice(tree.iter("meta"), MAX_META):
        content = element.get("content")
        if not isinstance(content, str) or not content.strip():
            continue
        for attribute in ("name", "property", "itemprop", "http-equiv"):
            name = element.get(attribute)
            if isinstance(name, str) and len(name) <= 100:
                found.setdefault(name.strip().lower(), []).append(content)
    return found


def _stated(tree: Any, data: bytes) -> dict[str, Any]:
    """The title, author and dates a page states (`<title>`, `_META`); what its markup
    defeats left out."""
    try:
        meta = _meta(tree) if tree is not None else {}
        title = tree.findtext(".//title") if tree is not None else None
    except Exception:  # a page's odd markup is no reason to refuse it
        meta, title = {}, None

    def said(key: str) -> list[str]:
        return [value for name in _META[key] for value in meta.get(name, ())]

    return {
        "title": first_text(title, _title_element(data), *said("title")),
        "author": first_text(*said("author")),
        "created": first_date(*said("created")),
        "modified": first_date(*said("modified")),
    }


def parse_html(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    import trafilatura
    from trafilatura.utils import load_html

    name = display_name(filename)
    tree: Any = load_html(data)
    title = ""
    markdown = None
    stated = _stated(tree, data)  # before trafilatura prunes the tree
    if tree is not None:
        try:
            metadata = trafilatura.extract_metadata(copy.deepcopy(tree))
            title = (metadata.title or "") if metadata is not None else ""
        except Exception:  # metadata is a bonus: a page without it is still read
            title = ""
        markdown = trafilatura.extract(
            tree,
            output_format="markdown",
            include_tables=True,
            include_comments=False,
            favor_recall=True,
        )
    text = markdown_text(markdown) if markdown else ""
    if not any(ch.isalnum() for ch in text):
        text = _body_text(data)
    if not any(ch.isalnum() for ch in text):
        raise ParseRefused(f"{name} holds no text")
    check_length(len(text), limits, filename)
    if not title:
        title = _title_element(data)
    return ParsedDocument(
        title=choose_title(filename, title, first_heading(text), first_line(text)),
        text=text,
        pages=[],
        media_type=HTML,
        properties=file_properties(HTML, lambda: stated),
    )


def _title_element(data: bytes) -> str:
    match = re.search(rb"<title[^>]*>(.*?)</title", data[:65536], re.I | re.S)
    if not match:
        return ""
    import html

    return clean_line(html.unescape(match.group(1).decode("utf-8", errors="replace")))
