"""The README stays true: every setting documented, the two commands present, CI runs them."""

from __future__ import annotations

from pathlib import Path

from infra.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_every_setting_is_in_the_configuration_table() -> None:
    missing = [
        f"RAGBUS_{name.upper()}"
        for name in Settings.model_fields
        if f"`RAGBUS_{name.upper()}`" not in README
    ]
    assert missing == []


def test_the_two_commands_are_documented_and_ci_runs_the_test_command() -> None:
    assert "make demo" in README
    assert "make test" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci.splitlines()
