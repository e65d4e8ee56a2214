"""A zip archive's table of contents, read within bounds: its end record first, then its
central directory entry by entry, stopping at the first bound crossed.

`zipfile.ZipFile` reads the whole central directory, however large, and makes a `ZipInfo` of
every entry before anyone can count them: a 10 MB upload of 200,000 empty entries took about
1 s and 100 MB to open. A Word or PowerPoint file's directory is a few kilobytes; so here the
end record's entry count and directory size are checked against `MAX_MEMBERS` and
`MAX_DIRECTORY_BYTES` before the directory is read, and the walk stops (refused) at the entry
past `MAX_MEMBERS` whatever the end record claimed. Each entry costs a `struct` unpack and no
object beyond its `ZipEntry`; what is read is the directory's bytes alone, through `read_at`,
so an upload is sniffed from its spooled file without being read into memory.

Only the table of contents is read: unpacking stays with `zipfile` in the parse child, after
`infra.documents.sniff.check_zip` has refused a bomb by these numbers.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from infra.documents.model import ParseRefused, display_name

MAX_MEMBERS = 20_000
"""Files a zip may hold: a long PowerPoint deck holds a few thousand."""
MAX_DIRECTORY_BYTES = 4 * 1024 * 1024
"""A zip's central directory, at most: `MAX_MEMBERS` entries with names of 150 bytes."""

ReadAt = Callable[[int, int], bytes]
"""`read_at(offset, size)`: `size` bytes of the file from `offset` (fewer at its end)."""

_END = b"PK\x05\x06"
_END_SIZE = 22
_MAX_COMMENT = 0xFFFF
_LOCATOR64 = b"PK\x06\x07"
_LOCATOR64_SIZE = 20
_END64 = b"PK\x06\x06"
_END64_SIZE = 56
_ENTRY = b"PK\x01\x02"
_ENTRY_SIZE = 46
_ZIP64_EXTRA = 0x0001
_UTF8_NAMES = 0x800


@dataclass(frozen=True)
class ZipEntry:
    name: str
    packed: int
    """Its compressed size."""
    unpacked: int


@dataclass(frozen=True)
class _Directory:
    offset: int
    size: int
    entries: int
    """As the end record claims: the walk does not trust it."""


def _damaged(filename: str) -> ParseRefused:
    return ParseRefused(f"{display_name(filename)} is a damaged zip archive; ragbus cannot read it")


def _too_many(filename: str, count: int | None = None) -> ParseRefused:
    held = f"{count:,}" if count is not None else f"more than {MAX_MEMBERS:,}"
    return ParseRefused(
        f"{display_name(filename)} looks like a zip bomb: it holds {held} files "
        f"(at most {MAX_MEMBERS:,} are read)"
    )


def _directory(read_at: ReadAt, size: int, filename: str) -> _Directory:
    """Where the central directory is, from the end record (and its zip64 form)."""
    tail_start = max(0, size - _END_SIZE - _MAX_COMMENT)
    tail = read_at(tail_start, size - tail_start)
    at = tail.rfind(_END)
    while at >= 0 and at + _END_SIZE > len(tail):
        at = tail.rfind(_END, 0, at)
    if at < 0:
        raise _damaged(filename)
    end_at = tail_start + at
    _, _, _, _, entries, dir_size, dir_offset, _ = struct.unpack_from("<4s4H2LH", tail, at)
    record_at = end_at
    if entries == 0xFFFF or dir_size == 0xFFFFFFFF or dir_offset == 0xFFFFFFFF:
        locator_at = end_at - _LOCATOR64_SIZE
        locator = read_at(locator_at, _LOCATOR64_SIZE) if locator_at >= 0 else b""
        if len(locator) == _LOCATOR64_SIZE and locator.startswith(_LOCATOR64):
            record_at = locator_at - _END64_SIZE
            record = read_at(record_at, _END64_SIZE) if record_at >= 0 else b""
            if len(record) != _END64_SIZE or not record.startswith(_END64):
                raise _damaged(filename)
            entries, _, dir_size, dir_offset = struct.unpack_from("<4Q", record, 24)
    if entries > MAX_MEMBERS:
        raise _too_many(filename, entries)
    if dir_size > MAX_DIRECTORY_BYTES:
        raise ParseRefused(
            f"{display_name(filename)} looks like a zip bomb: its table of contents is "
            f"{dir_size / 2**20:,.1f} MiB (at most {MAX_DIRECTORY_BYTES / 2**20:,.0f} MiB "
            "are read)"
        )
    # the directory ends where the end records begin (bytes before the archive, as in a
    # self-extracting file, move it all: `zipfile` finds it the same way)
    start = record_at - dir_size
    if start < 0:
        raise _damaged(filename)
    return _Directory(offset=start, size=dir_size, entries=entries)


def _zip64_sizes(extra: bytes, packed: int, unpacked: int) -> tuple[int, int]:
    """The real sizes where the entry's own say 0xFFFFFFFF: from its zip64 extra field."""
    at = 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<2H", extra, at)
        body = extra[at + 4 : at + 4 + length]
        if kind == _ZIP64_EXTRA:
            values = [v[0] for v in struct.iter_unpack("<Q", body[: len(body) // 8 * 8])]
            if unpacked == 0xFFFFFFFF and values:
                unpacked = values.pop(0)
            if packed == 0xFFFFFFFF and values:
                packed = values.pop(0)
            break
        at += 4 + length
    return packed, unpacked


def zip_entries(read_at: ReadAt, size: int, filename: str) -> list[ZipEntry]:
    """The archive's entries, read within the bounds above; `ParseRefused` for an archive
    that is damaged or over them."""
    directory = _directory(read_at, size, filename)
    data = read_at(directory.offset, directory.size)
    if len(data) != directory.size:
        raise _damaged(filename)
    entries: list[ZipEntry] = []
    at = 0
    while at < len(data):
        if data[at : at + 4] != _ENTRY or at + _ENTRY_SIZE > len(data):
            raise _damaged(filename)
        flags = struct.unpack_from("<H", data, at + 8)[0]
        packed, unpacked, name_len, extra_len, comment_len = struct.unpack_from(
            "<2L3H", data, at + 20
        )
        name_at = at + _ENTRY_SIZE
        extra_at = name_at + name_len
        at = extra_at + extra_len + comment_len
        if at > len(data):
            raise _damaged(filename)
        if len(entries) == MAX_MEMBERS:
            raise _too_many(filename)
        raw_name = data[name_at:extra_at]
        name = raw_name.decode("utf-8" if flags & _UTF8_NAMES else "cp437", errors="replace")
        if packed == 0xFFFFFFFF or unpacked == 0xFFFFFFFF:
            packed, unpacked = _zip64_sizes(data[extra_at : extra_at + extra_len], packed, unpacked)
        entries.append(ZipEntry(name=name, packed=packed, unpacked=unpacked))
    return entries
