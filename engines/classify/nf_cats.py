"""NF-CATS's real questions, mapped to ragbus's intents: for training and for scoring.

NF-CATS (V. Bolotova, V. Blinov, F. Scholer, W. B. Croft, M. Sanderson, "A Non-Factoid
Question-Answering Taxonomy", SIGIR 2022; MIT) labels real community-QA questions with a
non-factoid category. Its `train` and `valid` rows ship in the repository
(`intent_data/nf_cats.jsonl`, `SHIPPED`; MIT, its source and notice in `intent_data/SOURCES.md`),
and `ragbus train-intent` trains on both splits beside the bundled rows by default, so every
install trains the same model, and it learns from every real question there is.
To score a model on real questions it never saw, `--nf-cats-split train` trains on `train`
alone and `ragbus eval-intent` scores its `valid` rows (`studies.nfcats_intents --split valid`).

| NF-CATS | ragbus | why |
|---|---|---|
| INSTRUCTION | procedural | how to do something, steps |
| COMPARISON | comparison | two or more things against each other |
| EXPERIENCE | recommendation | advice and what people would choose, from their experience |
| FACTOID | factual | a fact |
| EVIDENCE-BASED | factual | a definition or an explanation that evidence settles |
| REASON | factual | why or how something is so: an explanation, factual by our conventions |
| DEBATE | (left out) | an opinion on a contested question: none of our intents asks for one |

Rows the bundled data already hold (90 were taken into it, `intent_data/SOURCES.md`) are left
out, so no row is both trained on and scored.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Final, Literal

from contracts.enums import Intent
from engines.classify.dataset import (
    TEST_FILE,
    TRAIN_FILE,
    DatasetError,
    Example,
    bundled_data_dir,
    load_examples,
)

SHIPPED: Final = bundled_data_dir() / "nf_cats.jsonl"
"""NF-CATS's train and valid rows whose category maps to an intent, as it gives them."""

Split = Literal["all", "train", "valid"]
"""One of NF-CATS's two public splits, or `all`: both."""
SPLITS: Final = ("train", "valid")
"""The splits `train_valid_human.jsonl` holds. A row of any other (a test split) is never read."""

MAPPING: Final = {
    "INSTRUCTION": "procedural",
    "COMPARISON": "comparison",
    "EXPERIENCE": "recommendation",
    "FACTOID": "factual",
    "EVIDENCE-BASED": "factual",
    "REASON": "factual",
}


def _key(text: str) -> str:
    return " ".join(text.lower().split())


def mapped_rows(source: Path, split: Split = "all") -> tuple[list[dict[str, str]], Counter[str]]:
    """The mapped rows of NF-CATS's `split` (`train`, `valid` or `all`) not already in the
    bundled data, and what was left out and why."""
    bundled = {
        _key(example.text)
        for name in (TRAIN_FILE, TEST_FILE)
        for example in load_examples(bundled_data_dir() / name)
    }
    wanted = SPLITS if split == "all" else (split,)
    rows: list[dict[str, str]] = []
    left_out: Counter[str] = Counter()
    seen: set[str] = set()
    for line in source.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        text, category = str(row["text"]).strip(), str(row["label"])
        label = MAPPING.get(category)
        if row.get("split") not in wanted:
            left_out[f"split {row.get('split')}"] += 1
        elif label is None:
            left_out[f"category {category}"] += 1
        elif _key(text) in bundled:
            left_out["in the bundled data"] += 1
        elif _key(text) in seen:
            left_out["duplicate"] += 1
        else:
            seen.add(_key(text))
            source_tag = f"nf-cats:{row.get('split', '')}:{category}"
            rows.append({"text": text, "label": label, "source": source_tag})
    return rows, left_out


def training_examples(source: Path, split: Split = "all") -> list[Example]:
    """NF-CATS's rows of `split` (`all`: train and valid; or `train` alone, to score on
    `valid`) as training examples, mapped, deduplicated and not bundled; `DatasetError` for a
    file that is not NF-CATS's JSONL or holds no such rows."""
    try:
        rows, _ = mapped_rows(source, split)
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        want = '{"text", "label", "split"}'
        raise DatasetError(f"{source}: want NF-CATS rows {want}: {exc}") from None
    if not rows:
        which = "" if split == "all" else f"{split} "
        raise DatasetError(f"{source}: no NF-CATS {which}rows with a mapped category")
    return [Example(row["text"], Intent(row["label"]), row["source"]) for row in rows]
