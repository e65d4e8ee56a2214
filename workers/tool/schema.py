"""Tool arguments checked against the tool's JSON Schema, with `jsonschema`.

The draft is the one the schema's `$schema` names (MCP servers written with the TypeScript SDK
declare draft-07, `http://json-schema.org/draft-07/schema#`); a schema naming none, or one
`jsonschema` does not know, is read as Draft 2020-12.

The messages name where the problem is (`$.n`, `$.tags[0]`) so a caller, human or LLM,
can correct the call.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for


def _validator_class(schema: dict[str, Any]) -> type[Validator]:
    cls: type[Validator] = validator_for(schema, default=Draft202012Validator)
    return cls


def check_schema(schema: dict[str, Any]) -> None:
    """Raise `jsonschema.SchemaError` for a tool declared with an invalid schema."""
    _validator_class(schema).check_schema(schema)


def validate(instance: Any, schema: dict[str, Any]) -> list[str]:
    """Every violation of `schema` by `instance`, as `path: message` lines (empty: valid)."""
    validator = _validator_class(schema)(schema)
    errors = sorted(
        validator.iter_errors(instance), key=lambda e: (list(e.absolute_path), e.message)
    )
    return [f"{error.json_path}: {error.message}" for error in errors]
