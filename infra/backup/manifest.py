"""A backup's manifest: what it holds, file by file, with sizes and SHA-256 checksums, and
what it does not (stores on servers the operator backs up with the servers' own tools).

`manifest.json` is written last, so a backup without one was cut short. Before a restore
touches anything, `verify` reads every file the manifest names and refuses the backup,
naming each file that is missing, short, altered or not named, rather than restoring part
of it.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

MANIFEST = "manifest.json"
FORMAT = 1

Part = Literal["jetstream", "redis", "vectors", "graph", "memory", "trust", "models"]


class BackupFile(BaseModel):
    path: str = Field(description="Relative to the backup's directory, with `/`.")
    part: Part
    bytes: int
    sha256: str


class Manifest(BaseModel):
    format: int = FORMAT
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    ragbus: str = Field(description="The version that wrote it.")
    files: list[BackupFile] = Field(default_factory=list)
    streams: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Each stream's configuration and state at its snapshot, by name.",
    )
    external: list[str] = Field(
        default_factory=list,
        description="What the operator must back up with the servers' own tools.",
    )
    warnings: list[str] = Field(default_factory=list)
    seconds: float | None = Field(default=None, description="How long the backup took.")


class DamagedBackup(ValueError):
    """A backup that must not be restored: the message names every problem found."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        while block := data.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def describe(root: Path, path: Path, part: Part) -> BackupFile:
    return BackupFile(
        path=path.relative_to(root).as_posix(),
        part=part,
        bytes=path.stat().st_size,
        sha256=sha256_of(path),
    )


def write(root: Path, manifest: Manifest) -> Path:
    """`manifest.json` in `root` (0600), written whole or not at all."""
    target = root / MANIFEST
    scratch = root / f".{MANIFEST}.tmp"
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(manifest.model_dump_json(indent=2))
        out.flush()
        os.fsync(out.fileno())
    scratch.replace(target)
    return target


def verify(root: Path) -> Manifest:
    """The manifest of the backup at `root`, once every file it names is there with its size
    and checksum and nothing else is; `DamagedBackup` naming every problem otherwise."""
    if not root.is_dir():
        raise DamagedBackup(f"{root} is not a directory")
    path = root / MANIFEST
    if not path.exists():
        raise DamagedBackup(
            f"{root} has no {MANIFEST}: the backup was cut short (the manifest is written last)"
        )
    try:
        manifest = Manifest.model_validate(json.loads(path.read_text()))
    except ValueError as exc:
        raise DamagedBackup(f"{path} cannot be read: {exc}") from None
    if manifest.format != FORMAT:
        raise DamagedBackup(f"{path} is format {manifest.format}; this ragbus reads {FORMAT}")
    problems: list[str] = []
    named = set()
    for entry in manifest.files:
        named.add(entry.path)
        file = root / entry.path
        if ".." in Path(entry.path).parts or Path(entry.path).is_absolute():
            problems.append(f"{entry.path}: a path outside the backup")
        elif not file.is_file():
            problems.append(f"{entry.path}: missing")
        elif file.stat().st_size != entry.bytes:
            size = file.stat().st_size
            problems.append(f"{entry.path}: {size} bytes, the manifest says {entry.bytes}")
        elif sha256_of(file) != entry.sha256:
            problems.append(f"{entry.path}: its checksum differs from the manifest's (altered)")
    for file in sorted(root.rglob("*")):
        relative = file.relative_to(root).as_posix()
        if file.is_file() and relative != MANIFEST and relative not in named:
            problems.append(f"{relative}: not in the manifest")
    if problems:
        raise DamagedBackup(
            f"the backup at {root} is damaged or partial; nothing was restored:\n- "
            + "\n- ".join(problems)
        )
    return manifest
