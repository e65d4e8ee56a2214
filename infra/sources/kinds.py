"""What a source is read through: one small interface (`SourceReader`) that every kind of
source implements, so a new kind is a small module beside `FolderReader`.

A reader lists its paths cheaply, each with a version (what a stat or an ETag says of it, never
its bytes), and reads one path's bytes when a sync needs them. Change detection is the sync's
(`infra.sources.plan`): an unchanged path costs its listing, never a read.
"""

from __future__ import annotations

import fnmatch
import mimetypes
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from contracts.sources import SourceRecord
from contracts.tenancy import DEFAULT_TENANT
from infra.runtime.ingest_producer import FILE_SUFFIXES, TEXT_SUFFIXES
from infra.runtime.ingest_tree import Skipped, read_regular, walk_tree

ALWAYS_READ = "unknown:"
"""The version of a path whose listing says nothing of its bytes (a page without validators):
it is read every sync, and sent only when its bytes changed."""


@dataclass(frozen=True)
class Listed:
    """One path of a source as its listing shows it."""

    path: str
    """Relative to the source, `/`-separated."""
    version: str
    """Changes whenever the bytes may have (size and modification time; an ETag)."""
    size: int


class SourceReader(Protocol):
    """One kind of source: its listing, and a path's bytes."""

    def listing(self, skipped: list[Skipped]) -> Iterator[Listed]:
        """Every path the source offers now, in path order; what is passed over is added to
        `skipped` with its reason (a path that was there and is passed over now keeps its
        document: only a path gone from the listing and from `skipped` is deleted)."""
        ...

    def read(self, path: str) -> bytes:
        """The bytes of `path` now; `OSError` when it cannot be read (gone, a link...)."""
        ...

    def media_type(self, path: str) -> str: ...

    def filename(self, path: str) -> str:
        """The name a path's file is stored and parsed under."""
        ...

    def close(self) -> None: ...


class SourceRefused(ValueError):
    """A source that may not be read from here, said plainly (a folder outside the roots)."""


def wanted(path: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Whether a path passes the source's patterns (`fnmatch`, where `*` crosses folders too):
    any `include` (none: all), and no `exclude`."""
    if any(fnmatch.fnmatchcase(path, pattern) for pattern in exclude):
        return False
    return not include or any(fnmatch.fnmatchcase(path, pattern) for pattern in include)


KINDS_READ = frozenset(TEXT_SUFFIXES | FILE_SUFFIXES)


def allowed_folder(location: str, tenant: str, roots: Sequence[Path]) -> Path:
    """The folder a folder source names, resolved, once it is known to lie under one of the
    operator's roots (for a tenant other than the default one, under `<root>/<tenant>`);
    `SourceRefused` otherwise."""
    if not roots:
        raise SourceRefused(
            "folder sources are off: the operator allows them under RAGBUS_SOURCE_ROOTS"
        )
    path = Path(location)
    if not path.is_absolute():
        raise SourceRefused(f"a folder source's location is an absolute path, not {location!r}")
    resolved = path.resolve()
    for root in roots:
        base = root.resolve()
        if tenant != DEFAULT_TENANT:
            base = base / tenant
        if resolved == base or base in resolved.parents:
            return resolved
    where = ", ".join(str(r / tenant) if tenant != DEFAULT_TENANT else str(r) for r in roots)
    raise SourceRefused(f"{location} is not under a folder sources may read ({where})")


class NamedPaths:
    """What a reader of named files answers alike: a path's media type from its name, its
    file name, and nothing to close."""

    def media_type(self, path: str) -> str:
        return mimetypes.guess_type(path)[0] or ""

    def filename(self, path: str) -> str:
        return PurePosixPath(path).name

    def close(self) -> None:
        pass


class FolderReader(NamedPaths):
    """A folder tree, walked as `ragbus ingest DIR` walks it (`infra.runtime.ingest_tree`):
    never through a link, never a FIFO or a device."""

    def __init__(self, root: Path, include: Sequence[str] = (), exclude: Sequence[str] = ()):
        self.root = root
        self.include, self.exclude = tuple(include), tuple(exclude)

    @classmethod
    def of(cls, record: SourceRecord, roots: Sequence[Path]) -> FolderReader:
        root = allowed_folder(record.location, record.tenant, roots)
        return cls(root, record.include, record.exclude)

    def listing(self, skipped: list[Skipped]) -> Iterator[Listed]:
        if not self.root.is_dir():
            raise SourceRefused(f"{self.root} is not a folder (or is gone)")
        for file in walk_tree(self.root, KINDS_READ, skipped):
            name = file.relative_to(self.root).as_posix()
            if not wanted(name, self.include, self.exclude):
                continue
            try:
                info = os.stat(file, follow_symlinks=False)
            except OSError as exc:
                skipped.append(Skipped(name, f"cannot be read ({exc.strerror})"))
                continue
            yield Listed(name, f"{info.st_mtime_ns}-{info.st_size}-{info.st_ino}", info.st_size)

    def read(self, path: str) -> bytes:
        return read_regular(self._inside(path))

    def _inside(self, path: str) -> Path:
        full = self.root / path
        if ".." in Path(path).parts or Path(path).is_absolute():
            raise OSError(f"{path} is not a path inside the source")
        return full
