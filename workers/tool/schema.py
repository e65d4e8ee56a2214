"""A small JSON-Schema validator for tool arguments.

`jsonschema` is not a dependency of ragbus, and tool parameters only need the core
keywords: type, properties, required, additionalProperties, enum, min/maxLength,
minimum/maximum and items. Unknown keywords are ignored, as JSON Schema does.
"""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list, tuple),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}


def _is_type(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("number", "integer"):
        return False  # JSON has no bool-is-int
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(name, (object,)))


def validate(instance: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Every way `instance` breaks `schema`, as readable messages; empty means valid."""
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_is_type(instance, n) for n in names):
            return [f"{path}: expected {' or '.join(names)}, got {type(instance).__name__}"]

    errors: list[str] = []
    if "enum" in schema and instance not in schema["enum"]:
        errors.append(f"{path}: must be one of {schema['enum']}")
    if isinstance(instance, str):
        if "maxLength" in schema and len(instance) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']} characters")
        if "minLength" in schema and len(instance) < schema["minLength"]:
            errors.append(f"{path}: shorter than {schema['minLength']} characters")
    if isinstance(instance, int | float) and not isinstance(instance, bool):
        if "maximum" in schema and instance > schema["maximum"]:
            errors.append(f"{path}: greater than {schema['maximum']}")
        if "minimum" in schema and instance < schema["minimum"]:
            errors.append(f"{path}: less than {schema['minimum']}")
    if isinstance(instance, list | tuple) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(instance):
            errors.extend(validate(item, schema["items"], f"{path}[{i}]"))
    if isinstance(instance, dict):
        errors.extend(_validate_object(instance, schema, path))
    return errors


def _validate_object(instance: dict[str, Any], schema: dict[str, Any], path: str) -> list[str]:
    errors = [
        f"{path}: missing required property '{name}'"
        for name in schema.get("required", [])
        if name not in instance
    ]
    properties: dict[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for name, value in instance.items():
        if name in properties:
            errors.extend(validate(value, properties[name], f"{path}.{name}"))
        elif extra is False:
            errors.append(f"{path}: unexpected property '{name}'")
        elif isinstance(extra, dict):
            errors.extend(validate(value, extra, f"{path}.{name}"))
    return errors
