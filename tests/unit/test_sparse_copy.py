"""A copied tree keeps its holes, and its size on disk counts what the files hold."""

from __future__ import annotations

from pathlib import Path

from infra.sparse_copy import bytes_on_disk, copy_tree
from infra.threads import available_memory


def test_a_sparse_file_is_copied_with_its_holes_and_counted_by_what_it_holds(
    tmp_path: Path,
) -> None:
    source = tmp_path / "source"
    (source / "inner").mkdir(parents=True)
    sparse = source / "inner" / "segment"
    with sparse.open("wb") as out:
        out.write(b"x" * 4096)
        out.seek(64 << 20)  # 64 MB of hole
        out.write(b"y" * 4096)
    (source / "small").write_bytes(b"z" * 10)
    copy_tree(source, tmp_path / "copy")
    copied = tmp_path / "copy" / "inner" / "segment"
    assert copied.read_bytes() == sparse.read_bytes()
    held = bytes_on_disk(source)
    assert 0 < held < 1 << 20, "the hole takes no disk"
    assert bytes_on_disk(tmp_path / "copy") <= held
    assert bytes_on_disk(source, tmp_path / "copy") == held + bytes_on_disk(tmp_path / "copy")
    assert bytes_on_disk(tmp_path / "absent") == 0


def test_the_memory_available_is_read_where_the_machine_says_it() -> None:
    available = available_memory()
    if Path("/proc/meminfo").exists():  # Linux: MemAvailable in kB, given in bytes
        assert available is not None and available % 1024 == 0 and available > 1 << 20
    else:
        assert available is None
