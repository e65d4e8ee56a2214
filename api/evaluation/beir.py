"""Reading a BEIR directory: `corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv`."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

Qrels = dict[str, dict[str, int]]
"""query id -> document id -> graded relevance (BEIR / trec_eval convention)."""


@dataclass(frozen=True)
class BeirSet:
    root: Path
    queries: dict[str, str]
    qrels: Qrels

    @property
    def corpus_path(self) -> Path:
        return self.root / "corpus.jsonl"


def load_qrels(path: Path) -> Qrels:
    qrels: Qrels = {}
    with path.open(encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter="\t")
        header = next(reader, None)
        if header and header[0] != "query-id":  # headerless file: the first row is data
            qrels.setdefault(header[0], {})[header[1]] = int(header[2])
        for row in reader:
            if len(row) >= 3:
                qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return qrels


def load_beir(root: Path, split: str = "test") -> BeirSet:
    qrels_path = root / "qrels" / f"{split}.tsv"
    for needed in (root / "corpus.jsonl", root / "queries.jsonl", qrels_path):
        if not needed.exists():
            raise FileNotFoundError(f"not a BEIR directory: {needed} is missing")
    qrels = load_qrels(qrels_path)
    queries: dict[str, str] = {}
    with (root / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                if row["_id"] in qrels and str(row.get("text", "")).strip():
                    queries[row["_id"]] = row["text"]
    return BeirSet(root, queries, {q: qrels[q] for q in queries})
