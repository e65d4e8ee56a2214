"""A backup's manifest refuses a damaged or partial backup, naming each problem, before a
restore touches anything (`infra.backup.manifest`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.backup.manifest import DamagedBackup, Manifest, describe, verify, write


def _backup(root: Path) -> Manifest:
    (root / "jetstream").mkdir(parents=True)
    (root / "jetstream" / "RAG_EVENTS.tar.s2").write_bytes(b"events" * 100)
    (root / "redis.rdb").write_bytes(b"REDIS0010")
    manifest = Manifest(
        ragbus="test",
        files=[
            describe(root, root / "jetstream" / "RAG_EVENTS.tar.s2", "jetstream"),
            describe(root, root / "redis.rdb", "redis"),
        ],
    )
    write(root, manifest)
    return manifest


def test_a_whole_backup_verifies(tmp_path: Path) -> None:
    written = _backup(tmp_path)
    assert verify(tmp_path) == written
    assert (tmp_path / "manifest.json").stat().st_mode & 0o777 == 0o600


def test_a_backup_without_its_manifest_was_cut_short(tmp_path: Path) -> None:
    _backup(tmp_path)
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(DamagedBackup, match="cut short"):
        verify(tmp_path)


def test_every_problem_is_named(tmp_path: Path) -> None:
    _backup(tmp_path)
    (tmp_path / "redis.rdb").write_bytes(b"REDIS0011")  # same size, other bytes
    events = tmp_path / "jetstream" / "RAG_EVENTS.tar.s2"
    events.write_bytes(events.read_bytes()[:-10])  # cut short
    (tmp_path / "stray.bin").write_bytes(b"?")
    with pytest.raises(DamagedBackup) as refused:
        verify(tmp_path)
    message = str(refused.value)
    assert "nothing was restored" in message
    assert "redis.rdb: its checksum differs" in message
    assert "jetstream/RAG_EVENTS.tar.s2: 590 bytes, the manifest says 600" in message
    assert "stray.bin: not in the manifest" in message


def test_a_missing_file_and_a_path_outside_are_refused(tmp_path: Path) -> None:
    manifest = _backup(tmp_path)
    (tmp_path / "redis.rdb").unlink()
    manifest.files.append(manifest.files[0].model_copy(update={"path": "../etc/passwd"}))
    write(tmp_path, manifest)
    with pytest.raises(DamagedBackup) as refused:
        verify(tmp_path)
    assert "redis.rdb: missing" in str(refused.value)
    assert "../etc/passwd: a path outside the backup" in str(refused.value)


def test_a_manifest_that_is_not_json_is_named(tmp_path: Path) -> None:
    _backup(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(DamagedBackup, match="cannot be read"):
        verify(tmp_path)
