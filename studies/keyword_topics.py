"""Real keyword queries for `ragbus eval-intent`: NFCorpus's topic queries, labelled factual.

NFCorpus (BEIR) holds, beside its article titles, the topic pages of a health-information
site, whose queries are what people type into a search box: a bare topic ("tempeh", "bad
breath", "gastric emptying"). Someone who types a topic wants to know about it: `factual` by
our conventions (`engines/classify/intent_data/SOURCES.md`). This writes a split's keyword
queries (lower case, at most `MAX_WORDS` words, no `?`) as `{text, label, source}` rows:

    python -m studies.keyword_topics ../shared/data/nfcorpus --split dev --out /tmp/topics.jsonl
    ragbus eval-intent --data /tmp/topics.jsonl --out results/intent-keyword-topics.json

It measures one thing only: how often a real keyword query is sent away from `factual` (and so
from the prior's weights) by wording it does not have. A model that says `factual` to
everything scores 1.0 here, so it is read beside the sets that have every intent. The data set
stays in `../shared/data`; nothing is trained on it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Final

from bench.evaluation.beir import load_qrels

MAX_WORDS: Final = 4


def query_texts(beir_dir: Path) -> dict[str, str]:
    """A BEIR set's queries: id → text."""
    texts: dict[str, str] = {}
    with (beir_dir / "queries.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                row = json.loads(line)
                texts[str(row["_id"])] = str(row["text"]).strip()
    return texts


def write_rows(out: Path, rows: list[dict[str, str]]) -> None:
    """`rows` as JSONL, the file `ragbus eval-intent --data` reads."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def topic_rows(beir_dir: Path, split: str) -> list[dict[str, str]]:
    """The split's topic queries (in the qrels' order, each once) as factual rows."""
    texts = query_texts(beir_dir)
    rows = []
    for query_id in load_qrels(beir_dir / "qrels" / f"{split}.tsv"):
        text = texts.get(query_id, "")
        if text and text == text.lower() and "?" not in text and len(text.split()) <= MAX_WORDS:
            rows.append({"text": text, "label": "factual", "source": f"nfcorpus:{split}:topic"})
    return rows


def rows_command(
    argv: list[str] | None,
    rows_of: Callable[[Path, str], list[dict[str, str]]],
    *,
    description: str,
    data_set: str,
    split: str,
    noun: str,
) -> None:
    """The command line both row writers share: a BEIR directory, a split, an output file."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("beir_dir", type=Path, help=f"{data_set} in BEIR format")
    parser.add_argument("--split", default=split, help=f"qrels split (default: {split})")
    parser.add_argument("--out", type=Path, required=True, help="JSONL of {text, label, source}")
    args = parser.parse_args(argv)
    rows = rows_of(args.beir_dir, args.split)
    write_rows(args.out, rows)
    print(f"wrote {len(rows)} {noun} to {args.out}")


def main(argv: list[str] | None = None) -> None:
    rows_command(
        argv,
        topic_rows,
        description=__doc__.splitlines()[0],
        data_set="NFCorpus",
        split="dev",
        noun="keyword queries",
    )


if __name__ == "__main__":
    main()
