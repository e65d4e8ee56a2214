"""Tool arguments checked against the tool's JSON Schema, with `jsonschema` (Draft 2020-12).

The messages name where the problem is (`$.n`, `$.tags[0]`) so a caller, human or LLM,
can correct the call.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator


def check_schema(schema: dict[str, Any]) -> None:
    """Raise `jsonschema.SchemaError` for a tool declared with an invalid schema."""
    Draft202012Validator.check_schema(schema)


def validate(instance: Any, schema: dict[str, Any]) -> list[str]:
    """Every violation of `schema` by `instance`, as `path: message` lines (empty: valid)."""
    validator = Draft202012Validator(schema)
    errors = sorted(
        validator.iter_errors(instance), key=lambda e: (list(e.absolute_path), e.message)
    )
    return [f"{error.json_path}: {error.message}" for error in errors]
