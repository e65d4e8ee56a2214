"""NF-CATS's real questions as an intent evaluation set, mapped to ragbus's intents.

NF-CATS (Bolotova et al., SIGIR 2022; MIT) labels real community-QA questions with a
non-factoid category. This maps the categories that name one of our intents and leaves out the
rows the bundled training or held-out data already hold, so `ragbus eval-intent --data` scores
the model on real questions it never saw:

    python -m studies.nfcats_intents ../shared/data/nf_cats/train_valid_human.jsonl \\
        --out /tmp/nfcats-intents.jsonl
    ragbus eval-intent --data /tmp/nfcats-intents.jsonl --out results/intent-nfcats.json

The data set stays in `../shared/data` (its README asks that it is not copied into the repo);
this writes the mapped rows wherever `--out` says. `--split train|valid` keeps one of
NF-CATS's own splits. The shipped model (`make intent-model`) trains on both, so a reading on
real questions a model never saw trains one on the bundled data and the `train` rows alone
(`ragbus train-intent --nf-cats FILE --nf-cats-split train --out DIR`) and scores it on the
`valid` rows (`ragbus eval-intent --model DIR --data ROWS`).

The mapping and the selection are the product's (`engines.classify.nf_cats`, which says
which categories map to which intent and why); this writes them out as JSONL.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from engines.classify.nf_cats import mapped_rows


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
