"""The labelled query set: JSONL rows of `{"text", "label", "source"?}`, validated on load.

A label the taxonomy lacks is an error, never a silently dropped row: a typo in a data
file must not quietly shrink a class. The bundled set ships as package data with a fixed
held-out split (`train.jsonl` / `test.jsonl`); `SOURCES.md` beside it says where rows came from.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Final

from contracts.enums import Intent

TRAIN_FILE: Final = "train.jsonl"
TEST_FILE: Final = "test.jsonl"
LABELS: Final = frozenset(intent.value for intent in Intent)


class DatasetError(ValueError):
    """A data file that cannot be used as it is; the message says which line and why."""


@dataclass(frozen=True)
class Example:
    text: str
    label: Intent
    source: str = ""


def bundled_data_dir() -> Path:
    """The package's own labelled set (works from a checkout and from an installed wheel)."""
    return Path(str(files("engines.classify").joinpath("intent_data")))


def load_examples(path: Path) -> list[Example]:
    """Every row of a JSONL file; raises `DatasetError` naming each unknown label."""
    examples: list[Example] = []
    unknown: Counter[str] = Counter()
    first_line: dict[str, int] = {}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                text, label = str(row["text"]).strip(), str(row["label"]).strip().lower()
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise DatasetError(f'{path}:{number}: want {{"text", "label"}}: {exc}') from None
            if label not in LABELS:
                unknown[label] += 1
                first_line.setdefault(label, number)
                continue
            examples.append(Example(text, Intent(label), str(row.get("source", ""))))
    if unknown:
        found = ", ".join(
            f"{label!r} ({count}×, first on line {first_line[label]})"
            for label, count in unknown.most_common()
        )
        known = ", ".join(sorted(LABELS))
        raise DatasetError(f"{path}: labels not in the taxonomy: {found}; known: {known}")
    if not examples:
        raise DatasetError(f"{path}: no examples")
    return examples


def data_hash(examples: Iterable[Example]) -> str:
    """A digest of texts and labels in order: the training data's identity in `meta.json`."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(f"{example.label.value}\t{example.text}\n".encode())
    return digest.hexdigest()


def first_per_class(examples: Iterable[Example], limit: int) -> list[Example]:
    """At most `limit` examples of each intent, in file order (the tests' tiny training set)."""
    taken: Counter[Intent] = Counter()
    out: list[Example] = []
    for example in examples:
        if taken[example.label] < limit:
            taken[example.label] += 1
            out.append(example)
    return out
