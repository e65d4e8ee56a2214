"""Metadata filters (`contracts.filters`) as Qdrant payload filters, for either backend.

Every chunk's payload carries its document's metadata under `meta` (`filterable`), so a
filtered dense or sparse search is one Qdrant query with a filter: the engine finds the best
`top_k` among the matching points (never a post-filter that leaves the list short).

The tree is written once (`compile_filter`) over a `Dialect`: the constructors of Qdrant
Edge's Python binding or of qdrant-client's models. Two details keep Qdrant's answer equal to
`contracts.filters.matches`, which the contract tests hold it to:
- a number's equality is a closed range, so `2020` finds a stored `2020.0` (a `MatchValue`
  takes integers only);
- a boolean is stored and matched as a tagged string (`BOOL_TRUE` / `BOOL_FALSE`): Edge's
  binding reads Python's `True` as the integer 1, which matches `1`, not `true`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from contracts.filters import All, AnyOf, Condition, Node, Not, rfc3339

META = "meta"
"""The payload field that holds a chunk's document metadata, as filters read it."""
BOOL_TRUE = "\x00true"
BOOL_FALSE = "\x00false"
"""How a boolean is kept in `meta`: a string no caller writes (a control character first)."""


def filterable(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A document's metadata as `meta` keeps it: booleans as `BOOL_TRUE`/`BOOL_FALSE`, at
    any depth; everything else as it is."""

    def kept(value: Any) -> Any:
        if isinstance(value, bool):
            return BOOL_TRUE if value else BOOL_FALSE
        if isinstance(value, Mapping):
            return {str(k): kept(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [kept(v) for v in value]
        return value

    return {str(k): kept(v) for k, v in metadata.items()}


def restored(meta: Mapping[str, Any]) -> dict[str, Any]:
    """`filterable`'s inverse: the metadata as the document had it, booleans again."""

    def back(value: Any) -> Any:
        if value == BOOL_TRUE:
            return True
        if value == BOOL_FALSE:
            return False
        if isinstance(value, Mapping):
            return {k: back(v) for k, v in value.items()}
        if isinstance(value, list):
            return [back(v) for v in value]
        return value

    return {str(k): back(v) for k, v in meta.items()}


class Dialect(Protocol):
    """What a backend's filter classes are asked for."""

    def all(self, parts: list[Any]) -> Any: ...
    def any(self, parts: list[Any]) -> Any: ...
    def none(self, parts: list[Any]) -> Any: ...
    def keyword(self, key: str, value: str) -> Any: ...
    def keywords(self, key: str, values: list[str]) -> Any: ...
    def number_range(self, key: str, bounds: dict[str, float]) -> Any: ...
    def date_range(self, key: str, bounds: dict[str, str]) -> Any: ...
    def empty(self, key: str) -> Any: ...


@dataclass(frozen=True)
class _Compiler:
    dialect: Dialect

    def node(self, node: Node) -> Any:
        d = self.dialect
        if isinstance(node, All):
            return d.all([self.node(part) for part in node.parts])
        if isinstance(node, AnyOf):
            return d.any([self.node(part) for part in node.parts])
        if isinstance(node, Not):
            return d.none([self.node(node.part)])
        return self.condition(node)

    def condition(self, c: Condition) -> Any:
        d, key = self.dialect, f"{META}.{c.field}"
        if c.op == "exists":
            return d.none([d.empty(key)]) if c.value else d.empty(key)
        if c.op in ("eq", "ne"):
            found = self.one_of(key, (c.value,))
            return found if c.op == "eq" else d.none([found])
        if c.op in ("in", "nin"):
            found = self.one_of(key, c.value)
            return found if c.op == "in" else d.none([found])
        bound = c.value
        if isinstance(bound, datetime):
            return d.date_range(key, {c.op: rfc3339(bound)})
        return d.number_range(key, {c.op: float(bound)})

    def one_of(self, key: str, values: tuple[Any, ...]) -> Any:
        """A condition that holds when the field equals any of `values`."""
        d = self.dialect
        words = [_keyword(v) for v in values if isinstance(v, str | bool)]
        numbers = [float(v) for v in values if not isinstance(v, str | bool)]
        parts = [d.number_range(key, {"gte": n, "lte": n}) for n in numbers]
        if len(words) == 1:
            parts.append(d.keyword(key, words[0]))
        elif words:
            parts.append(d.keywords(key, words))
        return parts[0] if len(parts) == 1 else d.any(parts)


def _keyword(value: str | bool) -> str:
    if isinstance(value, bool):
        return BOOL_TRUE if value else BOOL_FALSE
    return value


def compile_filter(node: Node, dialect: Dialect) -> Any:
    """The backend's filter for `node` (a condition alone is wrapped in a filter)."""
    compiled = _Compiler(dialect).node(node)
    return compiled if isinstance(node, All | AnyOf | Not) else dialect.all([compiled])
