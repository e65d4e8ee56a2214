"""NF-CATS mapped to our intents: categories that name an intent, minus what we trained on."""

from __future__ import annotations

import json
from pathlib import Path

from bench.nfcats_intents import mapped_rows
from workers.classify.dataset import TRAIN_FILE, bundled_data_dir, load_examples


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
