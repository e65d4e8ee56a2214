"""The bundled labelled query set: big enough, attributed, split once and for all."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from contracts.enums import Intent
from engines.classify.dataset import (
    TEST_FILE,
    TRAIN_FILE,
    DatasetError,
    bundled_data_dir,
    data_hash,
    first_per_class,
    load_examples,
)

DATA = bundled_data_dir()
TRAIN = load_examples(DATA / TRAIN_FILE)
TEST = load_examples(DATA / TEST_FILE)


def test_every_intent_has_at_least_80_examples_and_a_fifth_is_held_out() -> None:
    train, test = Counter(e.label for e in TRAIN), Counter(e.label for e in TEST)
    for intent in Intent:
        total = train[intent] + test[intent]
        assert total >= 80, intent
        assert test[intent] / total == pytest.approx(0.2, abs=0.02), intent


def test_every_row_says_where_it_came_from_and_sources_md_explains_it() -> None:
    sources = {e.source for e in TRAIN + TEST}
    assert "" not in sources
    notes = (DATA / "SOURCES.md").read_text()
    assert "nf-cats" in notes
    assert "ragbus" in notes
    assert {s.split(":")[0] for s in sources} <= {"ragbus", "nf-cats"}


def test_train_and_test_do_not_share_a_query() -> None:
    def norm(text: str) -> str:
        return " ".join(text.lower().split())

    assert not {norm(e.text) for e in TRAIN} & {norm(e.text) for e in TEST}


def test_the_data_is_varied_short_keywords_and_long_questions() -> None:
    lengths = [len(e.text.split()) for e in TRAIN + TEST]
    assert sum(n <= 4 for n in lengths) >= 60
    assert sum(n >= 10 for n in lengths) >= 60
    assert sum(e.text == e.text.lower() for e in TRAIN + TEST) >= 150  # as people type


def test_an_unknown_label_is_an_error_naming_it_and_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    rows = [
        {"text": "who built it", "label": "factual"},
        {"text": "why is it so", "label": "REASON"},
        {"text": "why not", "label": "reason"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(DatasetError, match=r"'reason' \(2×, first on line 2\)"):
        load_examples(path)


def test_a_malformed_row_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "no label"}\n')
    with pytest.raises(DatasetError, match=":1:"):
        load_examples(path)


def test_labels_are_read_case_insensitively_and_the_hash_follows_the_data() -> None:
    subset = first_per_class(TRAIN, 2)
    assert Counter(e.label for e in subset) == dict.fromkeys(Intent, 2)
    assert data_hash(subset) == data_hash(list(subset))
    assert data_hash(subset) != data_hash(subset[1:])
