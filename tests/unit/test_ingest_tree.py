"""`ragbus ingest DIR`'s folder walk (issue 54): nothing outside DIR is read through a link,
links inside it are not followed (their targets are read under their own paths), FIFOs,
broken links and loops are passed over without blocking, and every file passed over is
named with its reason."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from contracts.ingest import DocumentIn
from infra.runtime.ingest_producer import (
    FileUnreadable,
    LocalFile,
    Source,
    load_documents,
    load_sources,
    upload_file,
)
from infra.runtime.ingest_tree import Skipped, read_regular

SECRET = "The operator's seed: SUAM-NOT-FOR-THE-INDEX"


def ids(sources: list[Source]) -> list[str]:
    return [source.id for source in sources]


def texts(sources: list[Source]) -> str:
    return " ".join(s.text for s in sources if isinstance(s, DocumentIn))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the one ingested, as the trust directory is."""
    folder = tmp_path / "trust"
    folder.mkdir()
    (folder / "seed.txt").write_text(SECRET)
    (folder / "notes.md").write_text(f"# Seed\n\n{SECRET}")
    return folder


def test_a_link_out_of_the_folder_is_not_read_and_is_named(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "reports"
    root.mkdir()
    (root / "summary.md").write_text("# Summary\n\nThe quarter went well.")
    (root / "notes.txt").symlink_to(outside / "seed.txt")
    (root / "more").symlink_to(outside, target_is_directory=True)
    (root / "q3").mkdir()
    (root / "q3" / "seed.md").symlink_to(Path("..", "..", "trust", "notes.md"))  # relative
    skipped: list[Skipped] = []
    sources = list(load_sources(root, skipped))
    assert ids(sources) == ["summary.md"]
    assert SECRET not in texts(sources)
    assert skipped == [
        Skipped("more", f"a link to a folder outside the folder ({outside}): not followed"),
        Skipped(
            "notes.txt",
            f"a link to a file outside the folder ({outside / 'seed.txt'}): not followed",
        ),
        Skipped(
            "q3/seed.md",
            f"a link to a file outside the folder ({outside / 'notes.md'}): not followed",
        ),
    ]
    assert ids(list(load_documents(root))) == ["summary.md"], "the demo's and bench's reader too"


def test_links_inside_the_folder_are_not_followed_their_targets_read_once(
    tmp_path: Path,
) -> None:
    root = tmp_path / "reports"
    (root / "2024").mkdir(parents=True)
    (root / "2024" / "report.md").write_text("# Report\n\nRevenue rose.")
    (root / "2024" / "raw.data").write_text("not a kind read")
    (root / "latest.md").symlink_to(root / "2024" / "report.md")
    (root / "current").symlink_to(Path("2024"), target_is_directory=True)
    (root / "raw.txt").symlink_to(root / "2024" / "raw.data")
    (root / "2024" / "up").symlink_to(root, target_is_directory=True)  # a loop, if followed
    skipped: list[Skipped] = []
    assert ids(list(load_sources(root, skipped))) == ["2024__report.md"]
    assert skipped == [
        Skipped("2024/up", "a link to ., read under its own path", read_elsewhere=True),
        Skipped("current", "a link to 2024, read under its own path", read_elsewhere=True),
        Skipped("latest.md", "a link to 2024/report.md, read under its own path", True),
        Skipped("raw.txt", "a link to 2024/raw.data: links in the folder are not followed"),
    ]


def test_fifos_broken_links_loops_and_empty_files_are_passed_over_and_named(
    tmp_path: Path,
) -> None:
    root = tmp_path / "reports"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nThe canal opened in 1914.")
    os.mkfifo(root / "pipe.txt")  # reading it would wait for a writer for ever
    (root / "pipe.md").symlink_to(root / "pipe.txt")
    (root / "gone.pdf").symlink_to(root / "nothing.pdf")
    (root / "loop.md").symlink_to(root / "loop.md")
    (root / "null.txt").symlink_to("/dev/null")
    (root / "empty.pdf").write_bytes(b"")
    (root / "blank.md").write_text("  \n\n ")
    (root / "readme").symlink_to(root / "missing")  # not a kind read: not worth a word
    skipped: list[Skipped] = []
    assert ids(list(load_sources(root, skipped))) == ["a.md"]
    assert skipped == [
        Skipped("blank.md", "no text (white space only)"),
        Skipped("empty.pdf", "empty"),
        Skipped("gone.pdf", "a broken link"),
        Skipped("loop.md", "a link loop"),
        Skipped("null.txt", "a link to a file outside the folder (/dev/null): not followed"),
        Skipped("pipe.md", "a link to a FIFO: not followed"),
        Skipped("pipe.txt", "a FIFO, not a regular file"),
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_file_or_folder_is_named(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    (root / "locked").mkdir(parents=True)
    (root / "secret.pdf").write_bytes(b"%PDF-1.7")
    (root / "secret.pdf").chmod(0)
    (root / "locked").chmod(0)
    try:
        skipped: list[Skipped] = []
        assert list(load_sources(root, skipped)) == []
        assert skipped == [
            Skipped("locked", "a folder that cannot be listed (Permission denied)"),
            Skipped("secret.pdf", "cannot be read (Permission denied)"),
        ]
    finally:
        (root / "locked").chmod(0o755)


def test_the_folder_named_and_a_file_named_alone_may_be_links(
    tmp_path: Path, outside: Path
) -> None:
    root = tmp_path / "reports"
    (root / "q3").mkdir(parents=True)
    (root / "q3" / "summary.md").write_text("# Summary\n\nAll well.")
    alias = tmp_path / "alias"
    alias.symlink_to(root, target_is_directory=True)
    skipped: list[Skipped] = []
    assert ids(list(load_sources(alias, skipped))) == ["q3__summary.md"] and not skipped
    named = list(load_sources(root / "q3" / "summary.md"))
    assert ids(named) == ["summary.md"]
    (tmp_path / "seed link.txt").symlink_to(outside / "seed.txt")
    alone = list(load_sources(tmp_path / "seed link.txt"))
    assert ids(alone) == ["seed_link.txt"] and SECRET in texts(alone), "the person named it"


def test_a_file_swapped_for_a_link_after_the_walk_is_not_uploaded(
    tmp_path: Path, outside: Path
) -> None:
    root = tmp_path / "reports"
    root.mkdir()
    (root / "report.pdf").write_bytes(b"%PDF-1.7 a report")
    [found] = list(load_sources(root))
    assert isinstance(found, LocalFile) and read_regular(found.path) == b"%PDF-1.7 a report"
    (root / "report.pdf").unlink()
    (root / "report.pdf").symlink_to(outside / "seed.txt")
    with pytest.raises(FileUnreadable, match=r"report\.pdf changed since it was found"):
        asyncio.run(upload_file(None, found))  # type: ignore[arg-type]  # refused before any put
