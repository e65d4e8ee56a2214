"""What a file says about itself, made safe to keep: the `properties` of a `ParsedDocument`,
which the parse worker records under its document's metadata key `file`, for queries to
filter on.

- `type`: the kind the sniffed media type says, short and lower-case ("pdf", "docx",
  "pptx", "html", "markdown", "text", "image");
- `title`, `author`: as the file states them (not the title a parser falls back to);
- `created`, `modified`: the dates it states, as RFC 3339 UTC strings
  (`2024-05-01T10:00:00Z`; a date alone is midnight UTC; a time without a zone is taken as
  UTC);
- `pages`: its page (slide, image frame) count, for kinds with pages.

A reader hands what it found to `file_properties`, which keeps only these keys, and only
values that are clean and bounded: strings without control characters, cut to
`MAX_CHARS`; dates that parse, between `MIN_YEAR` and `MAX_YEAR`; a page count that is a
whole number between 1 and `MAX_PAGES`. Anything else (binary, the wrong type, nested junk, a
date that is not one) is dropped quietly: what a file says about itself never makes it fail
to parse. `clean_properties` is the same cleaning, for properties from elsewhere.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from contracts.ingest import MAX_PAGES
from infra.documents.model import DOCX, HTML, IMAGES, MARKDOWN, PDF, PPTX, TEXT

FILE_KEYS = ("type", "title", "author", "created", "modified", "pages")
"""The properties kept, in this order."""
MAX_CHARS = 500
"""A title or author longer than this is cut."""
_LOOKED_AT = 4 * MAX_CHARS
"""Of a longer stated string, only this much is looked at (a huge one is junk, or an
attack)."""
MIN_YEAR = 1900
MAX_YEAR = 2200
"""A date outside these years is not one a file could mean (Windows' zero date, 1601;
Excel's, 1899; a 9999 placeholder)."""

_TYPES: dict[str, str] = {
    PDF: "pdf",
    DOCX: "docx",
    PPTX: "pptx",
    HTML: "html",
    MARKDOWN: "markdown",
    TEXT: "text",
    **dict.fromkeys(IMAGES, "image"),
}
_TYPE = re.compile(r"^[a-z0-9][a-z0-9.+-]{0,31}$")
_REMOVED_CATEGORIES = frozenset({"Cc", "Cs", "Co", "Cn"})
"""Control characters, lone surrogates (which UTF-8 cannot carry), private-use and unassigned
code points."""
_BIDI = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufeff")
"""Direction overrides and the byte order mark: invisible, and able to disguise a value."""
_SPACES = re.compile(r"\s+")
_PDF_DATE = re.compile(
    r"^(?:D:)?(\d{4})(\d{2})(\d{2})(?:(\d{2})(?:(\d{2})(\d{2})?)?)?"
    r"\s*(?:([Zz]|[+-])\s*(?:(\d{2})'?(?:(\d{2})'?)?)?)?$"
)
"""PDF's date: `D:YYYYMMDDHHmmSSOHH'mm'`, everything after the day optional."""
_EXIF_DATE = re.compile(r"^(\d{4}):(\d{2}):(\d{2})([ T]\d{2}:\d{2}(?::\d{2})?.*)?$")
"""EXIF's date: `YYYY:MM:DD HH:MM:SS`, with no zone."""
_ZONE_AFTER_SPACE = re.compile(r"\s+(?=(?:Z|[+-]\d{2}:?\d{2})$)")


def file_type(media_type: str) -> str:
    """The short kind of a media type ("application/pdf": "pdf"); for a type not read, its
    subtype when that is a plain token, else "file"."""
    known = _TYPES.get(media_type)
    if known is not None:
        return known
    subtype = media_type.rpartition("/")[2].lower().split(";")[0].strip()
    return subtype if _TYPE.match(subtype) else "file"


def clean_text(value: Any) -> str | None:
    """A stated string, clean: control and invisible characters gone, runs of white space one
    space, cut to `MAX_CHARS`; None for anything else, or nothing left."""
    if not isinstance(value, str):
        return None
    kept = "".join(
        ch
        for ch in str(value[:_LOOKED_AT])
        if ch.isspace() or (unicodedata.category(ch) not in _REMOVED_CATEGORIES and ch not in _BIDI)
    )
    text = _SPACES.sub(" ", kept).strip()
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS].rstrip()
    return text or None


def rfc3339(value: Any) -> str | None:
    """A stated date as an RFC 3339 UTC string (`2024-05-01T10:00:00Z`), from a `datetime`, a
    `date`, or a string in ISO 8601, PDF (`D:20240501120000+02'00'`), EXIF
    (`2024:05:01 12:00:00`) or e-mail/HTTP form; None for anything that is not a date, or one
    outside `MIN_YEAR`..`MAX_YEAR`."""
    try:
        moment = _moment(value)
        if moment is None:
            return None
        if moment.tzinfo is None or moment.utcoffset() is None:
            moment = moment.replace(tzinfo=dt.UTC)
        moment = moment.astimezone(dt.UTC)
    except (ValueError, TypeError, OverflowError, ArithmeticError):
        return None
    if not MIN_YEAR <= moment.year <= MAX_YEAR:
        return None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _moment(value: Any) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, str) or len(value) > 100:
        return None
    text = value.strip().strip("\x00").strip()
    if not text:
        return None
    pdf = _PDF_DATE.match(text)
    if pdf is not None:
        return _pdf_moment(pdf)
    exif = _EXIF_DATE.match(text)
    if exif is not None:
        text = f"{exif[1]}-{exif[2]}-{exif[3]}{exif[4] or ''}"
    text = _ZONE_AFTER_SPACE.sub("", text)  # YAML's "2024-05-01 10:00:00 +02:00"
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        pass
    if any(ch.isalpha() for ch in text):  # "Wed, 01 May 2024 10:00:00 GMT"
        try:
            return email.utils.parsedate_to_datetime(text)
        except (ValueError, TypeError, IndexError):
            return None
    return None


def _pdf_moment(match: re.Match[str]) -> dt.datetime:
    year, month, day, hour, minute, second, sign, off_h, off_m = match.groups()
    zone: dt.tzinfo | None = None
    if sign in ("Z", "z"):
        zone = dt.UTC
    elif sign:
        offset = dt.timedelta(hours=int(off_h or 0), minutes=int(off_m or 0))
        zone = dt.timezone(offset if sign == "+" else -offset)  # ValueError past 24 h
    return dt.datetime(
        int(year),
        int(month),
        int(day),
        int(hour or 0),
        int(minute or 0),
        int(second or 0),
        tzinfo=zone,
    )


def clean_pages(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return None
    pages = int(value)
    return pages if 1 <= pages <= MAX_PAGES else None


def clean_properties(raw: Any) -> dict[str, Any]:
    """Only `FILE_KEYS`, each clean and bounded (see the module), in their order; anything
    else dropped. Clean properties come out as they went in."""
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, Any] = {}
    kind = raw.get("type")
    if isinstance(kind, str) and _TYPE.match(kind):
        out["type"] = kind
    for key in ("title", "author"):
        text = clean_text(raw.get(key))
        if text is not None:
            out[key] = text
    for key in ("created", "modified"):
        date = rfc3339(raw.get(key))
        if date is not None:
            out[key] = date
    pages = clean_pages(raw.get("pages"))
    if pages is not None:
        out["pages"] = pages
    return out


def file_properties(
    media_type: str, stated: Callable[[], Mapping[str, Any]] | None = None, pages: int = 0
) -> dict[str, Any]:
    """A reader's properties for its file: its `type` from `media_type`, what `stated()`
    returns (title, author, created, modified, raw: cleaned here), and `pages` where the
    kind has pages. `stated` failing in any way leaves those out, never the file."""
    found: Mapping[str, Any] = {}
    if stated is not None:
        try:
            found = stated()
        except Exception:  # a file's damaged properties are no reason to refuse it
            found = {}
    try:
        raw = {**found} if isinstance(found, Mapping) else {}
    except Exception:
        raw = {}
    raw["type"] = file_type(media_type)
    raw["pages"] = pages or None
    try:
        return clean_properties(raw)
    except Exception:  # a str subclass or a date that misbehaves: keep what is sure
        return {"type": file_type(media_type)}


def first_text(*values: Any) -> str | None:
    """The first value that is clean text (`clean_text`), for a property a file may state
    in several places: the first place that says it."""
    for value in values:
        text = clean_text(value)
        if text is not None:
            return text
    return None


def first_date(*values: Any) -> str | None:
    """The first value that is a date (`rfc3339`), as `first_text` for text."""
    for value in values:
        date = rfc3339(value)
        if date is not None:
            return date
    return None
