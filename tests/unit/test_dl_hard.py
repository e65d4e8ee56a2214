"""DL-HARD's annotated web queries as `eval-intent` rows: its intents mapped to ours."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.enums import Intent
from studies.dl_hard import ANNOTATIONS, INTENTS, query_rows


def _clone(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / ANNOTATIONS
    path.parent.mkdir(parents=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return tmp_path


def test_rows_keep_the_files_order_map_each_intent_and_leave_out_calculations(
    tmp_path: Path,
) -> None:
    clone = _clone(
        tmp_path,
        [
            "1\tbenefit policy in layoff\tdescription\tlong answer\tbusiness\tweb search",
            "2\thow to uninstall xbox from windows 10\tprocess\tlong answer\ttech\tweb",
            "3\tconvert sq meter to sq inch\tcalculation\tshort answer\tmath\tweb",
            "4\tirs /gov schedule d\tresource\tshort answer\tfinance\tweb",
            "5\twhat is the best music maker\tadvice\tlong answer\ttech\tweb",
            "6\tbenefit policy in layoff\tdescription\tlong answer\tbusiness\tweb search",
            "7\tweather in novi sad\tWeather\tshort answer\tgeo\tweb",
        ],
    )
    rows = query_rows(clone)
    assert [(r["text"], r["label"]) for r in rows] == [
        ("benefit policy in layoff", "factual"),
        ("how to uninstall xbox from windows 10", "procedural"),
        ("irs /gov schedule d", "navigation"),
        ("what is the best music maker", "recommendation"),
        ("weather in novi sad", "factual"),
    ]
    assert rows[-1]["source"] == "dl-hard:weather"


def test_an_intent_the_mapping_does_not_know_is_an_error_not_a_silent_factual(
    tmp_path: Path,
) -> None:
    clone = _clone(tmp_path, ["9\tsome query\tgossip\tshort answer\tnews\tweb"])
    with pytest.raises(ValueError, match="unknown intent 'gossip'"):
        query_rows(clone)


def test_every_mapped_intent_is_one_of_ours() -> None:
    assert {label for label in INTENTS.values() if label} <= {i.value for i in Intent}
