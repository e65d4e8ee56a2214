"""Filters on document metadata: the small language a question narrows its passages with.

A filter is a JSON object, in the shape MongoDB, Qdrant's clients, R2R and Chroma made familiar:

    {"year": {"$gte": 2020}, "kind": {"$in": ["report", "memo"]}, "tags": "product-x"}

- `{"field": value}` is equality; `{"field": {"$eq"|"$ne": value}}` says it out loud;
- `$in` / `$nin` take a list of values;
- `$gt`, `$gte`, `$lt`, `$lte` take a number, or an ISO 8601 date (`2024-05-01`,
  `2024-05-01T10:00:00Z`), which compares as a date;
- `$exists: true|false`: the field holds a value (not null, not an empty list);
- `$and` / `$or` take a list of filters, `$not` one filter; the keys of one object are
  all required (an implicit `$and`).

A field is a metadata key, or a dotted path into nested objects (`file.author`). A list in the
metadata matches when any of its items does (`{"tags": "x"}` finds `tags: ["x", "y"]`), as
Qdrant's payload filters do; `$ne` and `$nin` hold when no item equals. A number equals the
same number however it was written (`2020` and `2020.0`); `true` is not `1`; strings compare
exactly (case too).

`parse_filter` validates a caller's filter and gives the tree (`Condition`, `All`, `AnyOf`,
`Not`); `canonical` writes it back in one spelling (so two callers who mean the same filter
share work, and a request's filter is bounded on the bus); `matches` decides a metadata object,
for the stores that hold metadata out of Qdrant (the graph, the memory, the catalogue) and as
the oracle that the vector stores' own filters are tested against.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, GetJsonSchemaHandler

MAX_FILTER_DEPTH = 6
"""`$and` / `$or` / `$not` nest at most this deep."""
MAX_FILTER_CONDITIONS = 64
"""Conditions (one operator on one field) in one filter at most."""
MAX_FILTER_VALUES = 256
"""Values one `$in` / `$nin` lists at most."""
MAX_FILTER_VALUES_TOTAL = 1024
"""Values all of a filter's `$in` / `$nin` list at most, together."""
MAX_FILTER_STRING_CHARS = 500
"""A string a filter compares with, at most (a stored value longer than this never equals it)."""
FIELD_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}(?:\.[A-Za-z_][A-Za-z0-9_-]{0,63}){0,3}")
"""A metadata key, or a dotted path of at most four keys: letters, digits, `_` and `-`."""

Scalar = str | int | float | bool
Op = Literal["eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "exists"]
RANGE_OPS: tuple[Op, ...] = ("gt", "gte", "lt", "lte")
_OPS: dict[str, Op] = {
    "$eq": "eq",
    "$ne": "ne",
    "$in": "in",
    "$nin": "nin",
    "$gt": "gt",
    "$gte": "gte",
    "$lt": "lt",
    "$lte": "lte",
    "$exists": "exists",
}
_DATE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
)
"""What counts as a date, in a filter and in stored metadata: ISO 8601 / RFC 3339, from a bare
day to a time with seconds, fractions and an offset (none: UTC)."""


class FilterError(ValueError):
    """A filter that is not one: says where (`$and[1].year`) and what is wrong."""


@dataclass(frozen=True)
class Condition:
    """One operator on one field. `value` is a scalar (`eq`, `ne`), a tuple of scalars (`in`,
    `nin`), a number or an aware `datetime` (ranges), or a bool (`exists`)."""

    field: str
    op: Op
    value: Any

    @property
    def keys(self) -> frozenset[tuple[str, Any]]:
        """The equality keys (`equality_key`) of `eq`, `ne`, `in` and `nin`'s values: one set
        lookup a stored value, however many values `$in` lists."""
        found = self.__dict__.get("_keys")
        if found is None:
            listed = self.value if isinstance(self.value, tuple) else (self.value,)
            found = frozenset(k for k in map(equality_key, listed) if k is not None)
            object.__setattr__(self, "_keys", found)
        return found


@dataclass(frozen=True)
class All:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    part: Node


Node = Condition | All | AnyOf | Not


def parse_date(text: str) -> datetime | None:
    """An ISO 8601 date or date-time as an aware UTC datetime (none given: UTC); None when the
    text is not one (`_DATE`) or names no real day."""
    if not isinstance(text, str) or len(text) > 40 or not _DATE.fullmatch(text):
        return None
    raw = text.replace(" ", "T").replace("Z", "+00:00")
    if re.search(r"[+-]\d{4}$", raw):
        raw = raw[:-2] + ":" + raw[-2:]
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)


def rfc3339(moment: datetime) -> str:
    """How a filter's date is written back (`canonical`) and handed to a store."""
    text = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


# ---------------------------------------------------------------- parsing


class _Parser:
    def __init__(self) -> None:
        self.conditions = 0
        self.values = 0

    def node(self, raw: Any, where: str, depth: int) -> Node:
        if depth > MAX_FILTER_DEPTH:
            raise FilterError(f"{where or 'the filter'}: nested more than {MAX_FILTER_DEPTH} deep")
        if not isinstance(raw, Mapping):
            raise FilterError(f"{where or 'the filter'}: a filter is a JSON object")
        if not raw:
            raise FilterError(f"{where or 'the filter'}: an empty object filters nothing")
        return _joined(All, [self.entry(key, value, where, depth) for key, value in raw.items()])

    def entry(self, key: Any, value: Any, where: str, depth: int) -> Node:
        at = f"{where}.{key}" if where else str(key)
        if key in ("$and", "$or"):
            if not isinstance(value, list) or not value:
                raise FilterError(f"{at}: takes a non-empty list of filters")
            parts = [self.node(item, f"{at}[{i}]", depth + 1) for i, item in enumerate(value)]
            return _joined(All if key == "$and" else AnyOf, parts)
        if key == "$not":
            return Not(self.node(value, at, depth + 1))
        if not isinstance(key, str) or key.startswith("$"):
            raise FilterError(
                f"{at}: unknown operator here (fields, $and, $or and $not start a filter)"
            )
        if not FIELD_PATTERN.fullmatch(key):
            raise FilterError(
                f"{at}: a field is a metadata key or a dotted path of at most four keys, "
                "each letters, digits, '_' and '-' (at most 64), starting with a letter or '_'"
            )
        if isinstance(value, Mapping) and any(str(k).startswith("$") for k in value):
            if not all(str(k).startswith("$") for k in value):
                raise FilterError(f"{at}: mixes operators and keys (write a dotted path instead)")
            found = [self.condition(key, op, operand, at) for op, operand in value.items()]
            return _joined(All, found)
        return self.condition(key, "$eq", value, at)

    def condition(self, field: str, raw_op: Any, operand: Any, at: str) -> Condition:
        op = _OPS.get(raw_op)
        if op is None:
            known = ", ".join(_OPS)
            raise FilterError(f"{at}: unknown operator {str(raw_op)[:40]!r} (known: {known})")
        self.conditions += 1
        if self.conditions > MAX_FILTER_CONDITIONS:
            raise FilterError(f"the filter has more than {MAX_FILTER_CONDITIONS} conditions")
        where = f"{at}.{raw_op}" if raw_op != "$eq" or isinstance(operand, Mapping) else at
        if op in ("eq", "ne"):
            return Condition(field, op, _scalar(operand, where))
        if op in ("in", "nin"):
            if not isinstance(operand, list) or not operand:
                raise FilterError(f"{where}: takes a non-empty list of values")
            if len(operand) > MAX_FILTER_VALUES:
                raise FilterError(f"{where}: lists more than {MAX_FILTER_VALUES} values")
            self.values += len(operand)
            if self.values > MAX_FILTER_VALUES_TOTAL:
                raise FilterError(
                    f"{where}: the filter's lists hold more than {MAX_FILTER_VALUES_TOTAL} values"
                )
            values = tuple(_scalar(item, f"{where}[{i}]") for i, item in enumerate(operand))
            return Condition(field, op, tuple(dict.fromkeys(values, None)))
        if op == "exists":
            if not isinstance(operand, bool):
                raise FilterError(f"{where}: takes true or false")
            return Condition(field, op, operand)
        return Condition(field, op, _bound(operand, where))


def _joined(kind: type[All] | type[AnyOf], parts: Sequence[Node]) -> Node:
    """`parts` joined by `kind`: one part stands alone, a part of the same kind gives its own
    parts, and the parts are in one order (the filter's meaning has none), so that one
    filter has one spelling (`canonical`)."""
    flat: dict[str, Node] = {}
    for part in parts:
        for piece in part.parts if isinstance(part, kind) else (part,):
            flat.setdefault(json.dumps(to_json(piece), sort_keys=True), piece)
    pieces = [flat[key] for key in sorted(flat)]
    return pieces[0] if len(pieces) == 1 else kind(tuple(pieces))


def _scalar(value: Any, where: str) -> Scalar:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        if not math.isfinite(value) or abs(value) > 2**53:
            raise FilterError(f"{where}: a number must be finite and at most 2**53")
        return int(value) if float(value).is_integer() else float(value)
    if isinstance(value, str):
        if len(value) > MAX_FILTER_STRING_CHARS:
            raise FilterError(f"{where}: a string is at most {MAX_FILTER_STRING_CHARS} characters")
        return value
    if value is None:
        raise FilterError(f"{where}: null is not a value to compare with (use $exists)")
    raise FilterError(f"{where}: compares with a string, a number or true/false")


def _bound(value: Any, where: str) -> int | float | datetime:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = _scalar(value, where)
        assert isinstance(number, int | float)
        return number
    moment = parse_date(value) if isinstance(value, str) else None
    if moment is None:
        raise FilterError(
            f"{where}: a range takes a number or an ISO 8601 date (2024-05-01, "
            "2024-05-01T10:00:00Z)"
        )
    return moment


def parse_filter(raw: Any) -> Node:
    """The tree of a caller's filter; `FilterError` (a `ValueError`) saying where it is wrong."""
    return _Parser().node(raw, "", 1)


# ---------------------------------------------------------------- writing back


def _operand(value: Any) -> Any:
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def to_json(node: Node) -> dict[str, Any]:
    """The filter in its one spelling: every condition as `{field: {"$op": operand}}`, every
    combination explicit, dates in RFC 3339 UTC."""
    if isinstance(node, Condition):
        return {node.field: {f"${node.op}": _operand(node.value)}}
    if isinstance(node, Not):
        return {"$not": to_json(node.part)}
    key = "$and" if isinstance(node, All) else "$or"
    return {key: [to_json(part) for part in node.parts]}


def canonical(raw: Any) -> dict[str, Any]:
    """A caller's filter validated and written in its one spelling (`to_json`)."""
    return to_json(parse_filter(raw))


# ---------------------------------------------------------------- its JSON Schema

_TEXT = Annotated[str, Field(max_length=MAX_FILTER_STRING_CHARS)]
_NUMBER = Annotated[float, Field(ge=-(2**53), le=2**53)]
_SCALAR = _TEXT | _NUMBER | bool
_DATE_TEXT = Annotated[str, Field(pattern="^" + _DATE.pattern + "$")]
_BOUND = _NUMBER | _DATE_TEXT
_VALUES = Annotated[list[_SCALAR], Field(min_length=1, max_length=MAX_FILTER_VALUES)]


def _no_nulls(schema: dict[str, Any], **extra: Any) -> None:
    """An operator or a combination is given a value or left out, never `null`: the
    properties' schemas lose the `null` that their Python default (None) adds."""
    for prop in schema.get("properties", {}).values():
        choices = prop.get("anyOf")
        if choices:
            kept = [c for c in choices if c != {"type": "null"}]
            if len(kept) == 1:
                del prop["anyOf"]
                prop.update(kept[0])
            else:
                prop["anyOf"] = kept
        prop.pop("default", None)
    schema.update(extra)


class FilterOperators(BaseModel):
    """`{"$op": operand, …}` on one field (the JSON Schema only: `parse_filter` validates)."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra=lambda schema: _no_nulls(schema, minProperties=1)
    )

    eq: _SCALAR | None = Field(default=None, alias="$eq")
    ne: _SCALAR | None = Field(default=None, alias="$ne")
    in_: _VALUES | None = Field(default=None, alias="$in")
    nin: _VALUES | None = Field(default=None, alias="$nin")
    gt: _BOUND | None = Field(default=None, alias="$gt")
    gte: _BOUND | None = Field(default=None, alias="$gte")
    lt: _BOUND | None = Field(default=None, alias="$lt")
    lte: _BOUND | None = Field(default=None, alias="$lte")
    exists: bool | None = Field(default=None, alias="$exists")


_KEY = r"^(\$and|\$or|\$not|" + FIELD_PATTERN.pattern + ")$"


class MetadataFilterShape(BaseModel):
    """A filter's shape, for the JSON Schema of `MetadataFilter` (what OpenAPI and AsyncAPI
    publish); what no schema states (depth, counts, real dates) `parse_filter` refuses."""

    model_config = ConfigDict(
        extra="allow",
        title="MetadataFilter",
        json_schema_extra=lambda schema: _no_nulls(
            schema, minProperties=1, propertyNames={"pattern": _KEY}
        ),
    )

    and_: Annotated[list[MetadataFilterShape], Field(min_length=1)] | None = Field(
        default=None, alias="$and"
    )
    or_: Annotated[list[MetadataFilterShape], Field(min_length=1)] | None = Field(
        default=None, alias="$or"
    )
    not_: MetadataFilterShape | None = Field(default=None, alias="$not")
    __pydantic_extra__: dict[str, _SCALAR | FilterOperators]


class _PublishedAs:
    """Publishes `MetadataFilter`'s JSON Schema as `MetadataFilterShape`'s."""

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: GetJsonSchemaHandler) -> Any:
        return handler(MetadataFilterShape.__pydantic_core_schema__)


MetadataFilter = Annotated[dict[str, Any], AfterValidator(canonical), _PublishedAs]
"""A filter as messages and request bodies carry it: validated, in its one spelling."""
FilterJson = Annotated[dict[str, Any], _PublishedAs]
"""A filter as a door takes it before it makes the request (`POST /v1/queries`' body) that
validates it: the same published schema, and the request's own error when it is wrong."""


# ---------------------------------------------------------------- deciding


def values_at(metadata: Mapping[str, Any], path: str) -> list[Any]:
    """The values a dotted path reaches through nested objects: a list at its end is its
    items; a list on the way reaches nothing (as in Qdrant, where `a.b` is not `a[].b`)."""
    current: Any = metadata
    for key in path.split("."):
        if not isinstance(current, Mapping) or key not in current:
            return []
        current = current[key]
    return list(current) if isinstance(current, list) else [current]


def equality_key(value: Any) -> tuple[str, Any] | None:
    """What equality compares: a string as itself, a boolean as itself (never 1 or 0), any
    other number as a float (`2020` is `2020.0`); None for what no filter value equals."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, int | float):
        return ("n", float(value)) if math.isfinite(value) else None
    return None


def _any_equal(values: list[Any], wanted: frozenset[tuple[str, Any]]) -> bool:
    return any(equality_key(value) in wanted for value in values)


def _in_range(stored: Any, op: Op, bound: int | float | datetime) -> bool:
    if isinstance(bound, datetime):
        value: Any = parse_date(stored) if isinstance(stored, str) else None
    else:
        number_ok = isinstance(stored, int | float) and not isinstance(stored, bool)
        value = stored if number_ok and math.isfinite(stored) else None
    if value is None:
        return False
    if op == "gt":
        return bool(value > bound)
    if op == "gte":
        return bool(value >= bound)
    if op == "lt":
        return bool(value < bound)
    return bool(value <= bound)


def _holds(condition: Condition, metadata: Mapping[str, Any]) -> bool:
    values = values_at(metadata, condition.field)
    op, wanted = condition.op, condition.value
    if op == "exists":
        return any(value is not None for value in values) is wanted
    if op in ("eq", "in"):
        return _any_equal(values, condition.keys)
    if op in ("ne", "nin"):
        return not _any_equal(values, condition.keys)
    return any(_in_range(value, op, wanted) for value in values)


def matches(node: Node, metadata: Mapping[str, Any]) -> bool:
    """Whether a document with this metadata passes the filter."""
    if isinstance(node, Condition):
        return _holds(node, metadata)
    if isinstance(node, Not):
        return not matches(node.part, metadata)
    if isinstance(node, All):
        return all(matches(part, metadata) for part in node.parts)
    return any(matches(part, metadata) for part in node.parts)


def conditions(node: Node) -> Iterator[Condition]:
    """Every condition of the tree, in order."""
    if isinstance(node, Condition):
        yield node
    elif isinstance(node, Not):
        yield from conditions(node.part)
    else:
        for part in node.parts:
            yield from conditions(part)


def fields(node: Node) -> Sequence[str]:
    """The fields the filter reads, each once."""
    return list(dict.fromkeys(c.field for c in conditions(node)))
