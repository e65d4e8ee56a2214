"""A command whose product is a document writes only that document to stdout (its logs go to
stderr), so `ragbus openapi > openapi.json` writes a file a parser reads: the OpenAPI document
passes `openapi-spec-validator`, and the AsyncAPI document the official AsyncAPI parser
(`@asyncapi/parser`, `tools/asyncapi`, installed by `make test`) with 0 errors and 0 warnings."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate

ROOT = Path(__file__).resolve().parents[2]
PARSER = ROOT / "tools" / "asyncapi"


def document(command: str) -> dict[str, Any]:
    """`ragbus COMMAND`'s stdout, piped into a JSON parser as a shell would."""
    done = subprocess.run(
        [sys.executable, "-m", "cli", command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "RAGBUS_LOG_LEVEL": "INFO"},
    )
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def test_the_openapi_document_alone_on_stdout_is_valid_openapi() -> None:
    spec = document("openapi")
    assert spec["openapi"].startswith("3.")
    validate(spec)  # raises on an invalid document


@pytest.mark.skipif(
    not (PARSER / "node_modules" / "@asyncapi" / "parser").is_dir() or not shutil.which("node"),
    reason="the AsyncAPI parser is not installed (make test installs it)",
)
def test_the_asyncapi_document_alone_on_stdout_passes_the_official_parser(
    tmp_path: Path,
) -> None:
    spec = document("asyncapi")
    assert spec["asyncapi"].startswith("3.")
    path = tmp_path / "asyncapi.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    done = subprocess.run(
        ["node", "check.mjs", str(path)], cwd=PARSER, capture_output=True, text=True, check=True
    )
    *diagnostics, counts = done.stdout.strip().splitlines()
    assert json.loads(counts) == {"errors": 0, "warnings": 0, "parsed": True}, diagnostics
