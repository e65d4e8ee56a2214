"""The files of a folder tree that `ragbus ingest DIR` may read, and those it skips, each with
its reason (`walk_tree`, `Skipped`); reading one without following a link or blocking on a
FIFO (`read_regular`, `regular_size`).

What is read: the regular files under DIR whose names end in a kind read, met through real
folders, in path order. DIR itself may be a link (the folder named is the one meant).

Symbolic links inside the tree are never followed:
- a link whose target lies outside DIR (`notes.txt` -> the operator's trust directory) is
  skipped, and said: nothing outside the folder named is read;
- a link to a FIFO, a socket or a device, a broken link and a link loop are skipped, and said;
- a link to a file or a folder inside DIR is skipped too: its target is read under its own
  path, once (following it would index the same file twice, under two ids, and a folder link
  could loop). It is said, but is no loss (`Skipped.read_elsewhere`).
A FIFO, socket or device in the tree is skipped (reading one could block for ever), and so is
what cannot be read or listed (no permission). Hard links cannot be told from the file they
name: a hard link to a file outside DIR is read like any file in it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from infra.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class Skipped:
    """A file (or folder) of the tree not read, and why, for the person who ingests it."""

    name: str
    """Its path in the folder ingested (the file's name, for a file named alone)."""
    reason: str
    read_elsewhere: bool = False
    """A link inside the tree whose target is read under its own path: nothing is missing."""


class NotRegularFile(OSError):
    """A FIFO, socket or device where a file was expected."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(f"{path} is {kind}, not a regular file")
        self.kind = kind


def _kind(mode: int) -> str | None:
    """What a special file is, in words; None for a regular file or a folder."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return "not a regular file"


def _open_regular(path: Path) -> int:
    """A descriptor of `path`, a regular file: never through a link (O_NOFOLLOW: a file
    swapped for a link after the walk is refused) and never blocking (a FIFO)."""
    flags = os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK
    fd = os.open(path, flags)
    kind = _kind(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise NotRegularFile(path, kind)
    return fd


def regular_size(path: Path) -> int:
    """The size of a regular file that can be opened for reading; `OSError` otherwise."""
    fd = _open_regular(path)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def read_regular(path: Path) -> bytes:
    """The bytes of a regular file, opened as `regular_size` checks; `OSError` otherwise."""
    with os.fdopen(_open_regular(path), "rb") as file:
        return file.read()


def why(exc: OSError) -> str:
    """An `OSError` in a few words: "cannot be read (Permission denied)"."""
    if isinstance(exc, NotRegularFile):
        return f"{exc.kind}, not a regular file"
    return f"cannot be read ({exc.strerror or type(exc).__name__})"


class _Walk:
    def __init__(self, root: Path, wanted: frozenset[str], skipped: list[Skipped]) -> None:
        self.root = root.resolve()
        self.wanted = wanted
        self.skipped = skipped

    def name(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def skip(self, path: Path, reason: str, read_elsewhere: bool = False) -> None:
        log.warning("ingest_file_skipped", path=str(path), reason=reason)
        self.skipped.append(Skipped(self.name(path), reason, read_elsewhere))

    def files(self, folder: Path) -> Iterator[Path]:
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError as exc:
            self.skip(folder, f"a folder that {why(exc).replace('be read', 'be listed')}")
            return
        for entry in entries:
            path = Path(entry.path)
            try:
                if entry.is_symlink():
                    self.link(path)
                elif entry.is_dir(follow_symlinks=False):
                    yield from self.files(path)
                elif path.suffix.lower() in self.wanted:
                    kind = _kind(entry.stat(follow_symlinks=False).st_mode)
                    if kind is None:
                        yield path
                    else:
                        self.skip(path, f"{kind}, not a regular file")
            except OSError as exc:
                self.skip(path, why(exc))

    def link(self, path: Path) -> None:
        """Say why a link is not followed, where it could name something read."""
        try:
            target = path.resolve(strict=True)
            mode = target.stat().st_mode
        except (OSError, RuntimeError) as exc:  # 3.11's resolve: RuntimeError for a loop
            if path.suffix.lower() in self.wanted:
                loop = isinstance(exc, RuntimeError) or getattr(exc, "errno", 0) == errno.ELOOP
                self.skip(path, "a link loop" if loop else "a broken link")
            return
        folder = stat.S_ISDIR(mode)
        if not folder and path.suffix.lower() not in self.wanted:
            return  # not a kind read, wherever it leads
        if target != self.root and self.root not in target.parents:
            what = "folder" if folder else "file"
            self.skip(path, f"a link to a {what} outside the folder ({target}): not followed")
            return
        kind = _kind(mode)
        if kind is not None:
            self.skip(path, f"a link to {kind}: not followed")
            return
        own = self.name(target) or "."
        if folder or target.suffix.lower() in self.wanted:
            self.skip(path, f"a link to {own}, read under its own path", read_elsewhere=True)
        else:
            self.skip(path, f"a link to {own}: links in the folder are not followed")


def walk_tree(root: Path, wanted: frozenset[str], skipped: list[Skipped]) -> Iterator[Path]:
    """The regular files under `root` (resolved) whose suffix, lower-cased, is in `wanted`, in
    path order, never through a link; each file or folder passed over for a reason is added
    to `skipped` (module docstring)."""
    return _Walk(root, wanted, skipped).files(root.resolve())
