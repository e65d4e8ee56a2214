"""A document's metadata as every chunk's payload keeps it, under `meta`, for filters
(`contracts.filters`) to read: the same in both backends, so a migration copies it as it is.

A boolean is kept as a tagged string (`BOOL_TRUE` / `BOOL_FALSE`): Qdrant Edge's binding reads
Python's `True` as the integer 1, which matches `1`, not `true`. A Qdrant server filters on
`meta` itself (`infra.retrieval.vectors.qdrant`); the embedded store decides filters over its
documents' metadata in memory (`infra.retrieval.vectors.documents_table`) and reads `meta`
only to fill that table (`restored`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def keyword(value: str | bool) -> str:
    """A string or a boolean as `meta` keeps it (a boolean tagged)."""
    if isinstance(value, bool):
        return BOOL_TRUE if value else BOOL_FALSE
    return value
