"""`studies.intent_learning_curve`: the shares, the folds and the scores it reports."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from contracts.enums import Intent
from engines.classify.dataset import Example, bundled_data_dir, load_examples
from studies import intent_learning_curve as lc


def _hashed(examples: list[Example]) -> np.ndarray:
    """Unit vectors from the text alone: the cue words carry the intent here."""
    rows = [np.random.default_rng(zlib.crc32(e.text.encode())).normal(size=8) for e in examples]
    return np.asarray([row / np.linalg.norm(row) for row in rows])


def test_the_curve_trains_on_each_share_of_the_real_rows_and_scores_them_out_of_fold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lc, "_encode", _hashed)
    bundled = load_examples(bundled_data_dir() / "train.jsonl")
    wanted = {Intent.FACTUAL, Intent.PROCEDURAL, Intent.COMPARISON, Intent.RECOMMENDATION}
    real = [e for e in load_examples(bundled_data_dir() / "test.jsonl") if e.label in wanted]
    report = lc.learning_curve(bundled, real, shares=(0.0, 1.0))
    assert report["real_rows"] == len(real)
    assert set(report["real_rows_by_intent"]) == {i.value for i in wanted}
    none, every = report["curve"]
    assert none["real_rows_trained_on"] == 0
    assert every["real_rows_trained_on"] == round(len(real) * 4 / 5)
    for row in (none, every):
        assert set(row["f1"]) == {i.value for i in wanted}
        assert row["macro_f1"] == pytest.approx(np.mean(list(row["f1"].values())), abs=1e-3)
        assert 0.3 < row["macro_f1"] <= 1.0  # the bundled rows' cue words alone classify
