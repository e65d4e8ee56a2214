"""NF-CATS mapped to our intents: categories that name an intent, minus what we trained on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.enums import Intent
from engines.classify.dataset import TRAIN_FILE, DatasetError, bundled_data_dir, load_examples
from engines.classify.nf_cats import mapped_rows, training_examples


def test_rows_are_mapped_and_the_bundled_ones_left_out(tmp_path: Path) -> None:
    trained = next(
        e.text for e in load_examples(bundled_data_dir() / TRAIN_FILE) if "nf-cats" in e.source
    )
    rows = [
        {"text": "How do I reset my router?", "label": "INSTRUCTION", "split": "train"},
        {
            "text": "Why does my sourdough starter smell of acetone?",
            "label": "REASON",
            "split": "valid",
        },
        {
            "text": "why does my  SOURDOUGH starter smell of acetone?",
            "label": "REASON",
            "split": "train",
        },
        {"text": "Is free will real?", "label": "DEBATE", "split": "train"},
        {"text": trained, "label": "COMPARISON", "split": "train"},
    ]
    source = tmp_path / "nfcats.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    mapped, left_out = mapped_rows(source)
    assert [(r["text"], r["label"]) for r in mapped] == [
        ("How do I reset my router?", "procedural"),
        ("Why does my sourdough starter smell of acetone?", "factual"),
    ]
    assert mapped[1]["source"] == "nf-cats:valid:REASON"
    assert left_out == {"duplicate": 1, "category DEBATE": 1, "in the bundled data": 1}


def test_training_takes_both_public_splits_or_train_alone_and_never_a_test_row(
    tmp_path: Path,
) -> None:
    rows = [
        {"text": "How do I reset my router?", "label": "INSTRUCTION", "split": "train"},
        {"text": "Which laptop would you pick?", "label": "EXPERIENCE", "split": "valid"},
        {"text": "What is a sourdough starter?", "label": "EVIDENCE-BASED", "split": "test"},
    ]
    source = tmp_path / "nfcats.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    shipped = training_examples(source)
    assert [(e.text, e.label, e.source) for e in shipped] == [
        ("How do I reset my router?", Intent.PROCEDURAL, "nf-cats:train:INSTRUCTION"),
        ("Which laptop would you pick?", Intent.RECOMMENDATION, "nf-cats:valid:EXPERIENCE"),
    ]
    held_out = training_examples(source, "train")
    assert [e.text for e in held_out] == ["How do I reset my router?"]
    assert mapped_rows(source)[1] == {"split test": 1}


def test_a_file_that_is_not_nf_cats_is_a_clear_error(tmp_path: Path) -> None:
    wrong = tmp_path / "queries.jsonl"
    wrong.write_text('{"query": "tempeh"}\n')
    with pytest.raises(DatasetError, match="want NF-CATS rows"):
        training_examples(wrong)
    only_valid = tmp_path / "valid.jsonl"
    only_valid.write_text('{"text": "Why?", "label": "REASON", "split": "valid"}\n')
    with pytest.raises(DatasetError, match="no NF-CATS train rows"):
        training_examples(only_valid, "train")
    assert len(training_examples(only_valid)) == 1
