"""The benchmark tables say what the reports say, and nothing rounder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.figures import _share
from bench.tables import replaced, table


def test_a_share_below_all_is_never_shown_as_all() -> None:
    assert _share(1.0) == "100 %"
    assert _share(0.998) == "99.8 %"
    assert _share(0.99996) == "99.9 %"
    assert _share(0.0) == "0.0 %"


def test_a_row_names_the_run_its_report_records(tmp_path: Path) -> None:
    report = {
        "documents": 10,
        "chunks": 20,
        "seconds": 60.0,
        "chunks_per_minute": 20.0,
        "run": {"date": "2026-01-02", "machine": "2 cores, X", "command": "ragbus bench-ingest D"},
    }
    (tmp_path / "ingest.json").write_text(json.dumps(report))
    rows = table(tmp_path).splitlines()
    assert len(rows) == 3  # header, rule, the one report present
    assert "20 chunks/min" in rows[2]
    assert "2026-01-02, 2 cores, X" in rows[2]
    assert "`ragbus bench-ingest D`" in rows[2]


def test_a_report_without_its_run_says_so(tmp_path: Path) -> None:
    report = {"n": 5, "accuracy": 0.8, "macro_f1": 0.75}
    (tmp_path / "intent.json").write_text(json.dumps(report))
    row = table(tmp_path).splitlines()[2]
    assert "undated, machine not recorded" in row
    assert "`not recorded`" in row


def test_only_the_text_between_the_markers_is_replaced() -> None:
    markers = ("<!-- a -->", "<!-- b -->")
    text = "head\n<!-- a -->\nold\n<!-- b -->\ntail\n"
    assert replaced(text, markers, "new") == "head\n<!-- a -->\nnew\n<!-- b -->\ntail\n"
    with pytest.raises(ValueError, match="markers"):
        replaced("no markers here", markers, "new")


def test_the_channels_stand_side_by_side_with_the_best_in_bold(tmp_path: Path) -> None:
    from bench.tables import channel_table

    metrics = {"ndcg@10": 0.5, "recall@10": 0.6, "mrr@10": 0.7}
    report = {
        "queries": 3,
        "fused": metrics,
        "channels": {"vector": {**metrics, "ndcg@10": 0.55}, "sparse": metrics},
        "baselines": {"vector+sparse": metrics},
    }
    (tmp_path / "eval-musique.json").write_text(json.dumps(report))
    lines = channel_table(tmp_path).splitlines()
    ndcg = next(line for line in lines if "nDCG@10" in line)
    assert "| 0.500 | **0.550** | 0.500 | — | — | 0.500 |" in ndcg
    assert not any("Complete@10" in line for line in lines)  # not in this report: no row
    assert lines[-1].startswith("- MuSiQue train-100: 3 queries, undated")


def test_the_fused_rankings_difference_from_plain_hybrid_is_shown_with_its_interval(
    tmp_path: Path,
) -> None:
    from bench.tables import channel_table

    metrics = {"ndcg@10": 0.5}
    difference = {
        "difference": 0.003,
        "ci95": [-0.004, 0.011],
        "p": 0.41,
        "queries": 323,
        "better": 90,
        "worse": 80,
    }
    report = {
        "queries": 323,
        "fused": metrics,
        "channels": {},
        "baselines": {"vector+sparse": metrics},
        "fused_against": {"vector+sparse": {"ndcg@10": difference}},
    }
    (tmp_path / "eval-nfcorpus.json").write_text(json.dumps(report))
    lines = channel_table(tmp_path).splitlines()
    assert (
        "| NFCorpus test, nDCG@10 | +0.003 | −0.004 to +0.011 | 0.410 | 90 / 80 of 323 |" in lines
    )
    (tmp_path / "eval-nfcorpus.json").write_text(json.dumps({**report, "fused_against": {}}))
    assert not any("95% interval" in line for line in channel_table(tmp_path).splitlines())
