"""NF-CATS's real questions as an intent evaluation set, mapped to ragbus's intents.

NF-CATS (Bolotova et al., SIGIR 2022; MIT) labels real community-QA questions with a
non-factoid category. This maps the categories that name one of our intents and leaves out the
rows the bundled training or held-out data already hold, so `ragbus eval-intent --data` scores
the model on real questions it never saw:

    python -m bench.nfcats_intents ../shared/data/nf_cats/train_valid_human.jsonl \\
        --out /tmp/nfcats-intents.jsonl
    ragbus eval-intent --data /tmp/nfcats-intents.jsonl --out results/intent-nfcats.json

The data set stays in `../shared/data` (its README asks that it is not copied into the repo);
this writes the mapped rows wherever `--out` says. `--split train|valid` keeps one of
NF-CATS's own splits: a model trained with the bundled data and the `train` rows
(`ragbus train-intent --data`) is scored on the `valid` rows, which it never saw.

| NF-CATS | ragbus | why |
|---|---|---|
| INSTRUCTION | procedural | how to do something, steps |
| COMPARISON | comparison | two or more things against each other |
| EXPERIENCE | recommendation | advice and what people would choose, from their experience |
| FACTOID | factual | a fact |
| EVIDENCE-BASED | factual | a definition or an explanation that evidence settles |
| REASON | factual | why or how something is so: an explanation, factual by our conventions |
| DEBATE | (left out) | an opinion on a contested question: none of our intents asks for one |
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Final

from workers.classify.dataset import TEST_FILE, TRAIN_FILE, bundled_data_dir, load_examples

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


def mapped_rows(source: Path, split: str = "all") -> tuple[list[dict[str, str]], Counter[str]]:
    """The mapped rows of NF-CATS's `split` (`train`, `valid` or `all`) not already in the
    bundled data, and what was left out and why."""
    bundled = {
        _key(example.text)
        for name in (TRAIN_FILE, TEST_FILE)
        for example in load_examples(bundled_data_dir() / name)
    }
    rows: list[dict[str, str]] = []
    left_out: Counter[str] = Counter()
    seen: set[str] = set()
    for line in source.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        text, category = str(row["text"]).strip(), str(row["label"])
        label = MAPPING.get(category)
        if split != "all" and row.get("split") != split:
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="NF-CATS train_valid_human.jsonl")
    parser.add_argument("--out", type=Path, required=True, help="JSONL of {text, label, source}")
    parser.add_argument(
        "--split",
        choices=("all", "train", "valid"),
        default="all",
        help="NF-CATS's own split: train on `train`, score on `valid` (default: both)",
    )
    args = parser.parse_args(argv)
    rows, left_out = mapped_rows(args.source, args.split)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    labels = Counter(row["label"] for row in rows)
    print(f"wrote {len(rows)} rows to {args.out}: {dict(labels)}; left out {dict(left_out)}")


if __name__ == "__main__":
    main()
