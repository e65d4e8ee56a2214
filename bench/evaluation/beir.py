"""Reading a BEIR directory: `corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv`."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

Qrels = dict[str, dict[str, int]]
"""query id -> document id -> graded relevance (BEIR / trec_eval convention)."""


@dataclass(frozen=True)
class BeirSet:
    root: Path
    queries: dict[str, str]
    qrels: Qrels
    answers: dict[str, list[str]] = field(default_factory=dict)
    """query id -> the reference answers, for the sets whose queries carry them (MuSiQue)."""

    @property
    def corpus_path(self) -> Path:
        return self.root / "corpus.jsonl"

    def first(self, limit: int) -> BeirSet:
        """The same set cut to its first `limit` queries by id, for quick runs."""
        keep = sorted(self.queries)[:limit]
        return BeirSet(
            self.root,
            {q: self.queries[q] for q in keep},
            {q: self.qrels[q] for q in keep},
            {q: self.answers[q] for q in keep if q in self.answers},
        )


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
    answers: dict[str, list[str]] = {}
    with (root / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                if row["_id"] in qrels and str(row.get("text", "")).strip():
                    queries[row["_id"]] = row["text"]
                    if row.get("answers"):
                        answers[row["_id"]] = [str(a) for a in row["answers"]]
    return BeirSet(root, queries, {q: qrels[q] for q in queries}, answers)
