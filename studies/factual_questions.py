"""Real factual questions for `ragbus eval-intent`: a question-answering set's questions,
labelled factual.

MuSiQue's questions ("Who was the first president of the association which published Journal
of Psychotherapy Integration?") are multi-hop factual questions written by crowd workers, and
nobody here trained on them. A wrong route costs most on them: the `summary` profile cost
MuSiQue 0.16 nDCG@10 (docs/evaluation.md). This writes every question of a BEIR-format set's
split as a `{text, label, source}` row:

    python -m studies.factual_questions ../shared/data/musique_train100 --out /tmp/musique.jsonl
    ragbus eval-intent --data /tmp/musique.jsonl --out results/intent-musique-questions.json

Like `studies.keyword_topics`, it measures one thing: how often a real factual question is sent
away from `factual`. A model that says `factual` to everything scores 1.0, so it is read beside
the sets that have every intent. The data set stays where it lies; nothing is trained on it.
"""

from __future__ import annotations

from pathlib import Path

from bench.evaluation.beir import load_qrels
from studies.keyword_topics import query_texts, rows_command


def question_rows(beir_dir: Path, split: str) -> list[dict[str, str]]:
    """The split's questions (in the qrels' order, each once) as factual rows."""
    texts = query_texts(beir_dir)
    source = f"{beir_dir.name}:{split}:question"
    return [
        {"text": texts[query_id], "label": "factual", "source": source}
        for query_id in load_qrels(beir_dir / "qrels" / f"{split}.tsv")
        if texts.get(query_id)
    ]


def main(argv: list[str] | None = None) -> None:
    rows_command(
        argv,
        question_rows,
        description=__doc__.splitlines()[0],
        data_set="a question set",
        split="test",
        noun="questions",
    )


if __name__ == "__main__":
    main()
