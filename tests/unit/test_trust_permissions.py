"""The trust directory's keys are refused when others may read them, and the directory when
others may write it: the error names the path and the `chmod` that fixes it, and nothing is
read (or made) until then."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.tenancy.trust import SERVICE_CREDS, TrustError, load


@pytest.fixture
def trust_dir(tmp_path: Path) -> Path:
    load(tmp_path / "trust", create=True)
    return tmp_path / "trust"


@pytest.mark.parametrize(
    ("mode", "who"),
    [(0o640, "group"), (0o604, "others"), (0o644, "group and others"), (0o660, "group")],
)
@pytest.mark.parametrize("create", [False, True])
def test_a_key_others_may_read_is_refused_with_the_chmod_to_run(
    trust_dir: Path, mode: int, who: str, create: bool
) -> None:
    key = trust_dir / "operator.nk"
    key.chmod(mode)
    with pytest.raises(TrustError) as refused:
        load(trust_dir, create=create)
    message = str(refused.value)
    assert str(key) in message
    assert f"open to {who} (mode {mode:04o})" in message
    assert f"chmod 600 {key}" in message
    key.chmod(0o600)
    load(trust_dir, create=create)  # and taken once fixed


def test_credentials_others_may_read_are_refused_too(trust_dir: Path) -> None:
    creds = trust_dir / SERVICE_CREDS
    creds.chmod(0o644)
    with pytest.raises(TrustError, match=re.escape(f"chmod 600 {creds}")):
        load(trust_dir)


@pytest.mark.parametrize(("mode", "who"), [(0o770, "group"), (0o707, "others"), (0o777, "group")])
def test_a_directory_others_may_write_is_refused(trust_dir: Path, mode: int, who: str) -> None:
    trust_dir.chmod(mode)
    try:
        with pytest.raises(TrustError) as refused:
            load(trust_dir)
        assert f"writable by {who}" in str(refused.value)
        assert f"chmod 700 {trust_dir}" in str(refused.value)
    finally:
        trust_dir.chmod(0o700)


def test_a_directory_others_may_only_read_is_taken(trust_dir: Path) -> None:
    """Its keys are what matters: the names of the files in it are no secret."""
    trust_dir.chmod(0o755)
    load(trust_dir)
