"""Every saved report says where it came from: date, machine, command and commit."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from bench.provenance import command, machine, run_record
from cli.common import save_json


def test_a_saved_report_carries_its_run(tmp_path: Path) -> None:
    out = tmp_path / "deep" / "report.json"
    save_json({"throughput_qps": 1.5}, out)
    saved = json.loads(out.read_text())
    assert saved["throughput_qps"] == 1.5
    run = saved["run"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", run["date"])
    assert re.match(r"\d+ cores, ", run["machine"])
    assert run["command"].startswith("ragbus")


def test_a_report_that_names_its_run_keeps_it(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    given = {"date": "2026-01-01", "machine": "elsewhere", "command": "ragbus x", "commit": None}
    save_json({"run": given}, out)
    assert json.loads(out.read_text())["run"] == given


def test_the_command_is_named_ragbus_with_its_arguments_quoted() -> None:
    assert command(["/x/.venv/bin/ragbus", "bench", "--queries", "my file.txt"]) == (
        "ragbus bench --queries 'my file.txt'"
    )
    assert command(["python -m cli"]) == "ragbus"


@pytest.mark.parametrize("module", ["bench.floor", "studies.feedback_study"])
def test_a_bench_or_study_module_run_with_dash_m_is_named_as_typed(
    monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    import types

    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name=module)  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", main)
    path = "/x/" + module.replace(".", "/") + ".py"
    monkeypatch.setattr(sys, "argv", [path, "--set", "a b"])
    assert command() == f"python -m {module} --set 'a b'"


def test_the_machine_line_starts_with_its_cores() -> None:
    line = machine()
    assert re.match(r"\d+ cores, .+", line)
    assert set(run_record(["ragbus"])) == {"date", "machine", "command", "commit"}
