"""How the intent head's macro-F1 on real questions grows with the real questions it is
trained on: does more labelled data move it, and for which intent?

Five-fold cross-validation over NF-CATS's **train** split (`--split all`: over train and
valid, the rows the shipped model learns from). Each fold trains the shipped head
(`engines.classify.cue_head.CueHead`, its prior included) on the bundled rows plus a share of
the other folds' NF-CATS rows, drawn at random (seeded), and predicts the held-out fold. The
report gives, for each share, the macro-F1 over NF-CATS's four intents and each intent's F1,
out of fold:

    python -m studies.intent_learning_curve ../shared/data/nf_cats/train_valid_human.jsonl \\
        --out results/intent-learning-curve.json

The head alone is measured, on the body's embeddings, without the rules around it
(`engines.classify.query_form`): the question is what data would teach it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Final

import numpy as np

from bench.provenance import run_record
from engines.classify import nf_cats
from engines.classify.cue_head import CueHead
from engines.classify.dataset import Example, bundled_data_dir, load_examples
from engines.classify.training import DEFAULT_SEED, body_embeddings, shared_body
from infra.settings import Settings

SHARES: Final = (0.0, 0.25, 0.5, 0.75, 1.0)
FOLDS: Final = 5


def _encode(examples: list[Example]) -> np.ndarray:
    path, _ = shared_body(Settings())
    return body_embeddings(path, [e.text for e in examples])


def learning_curve(
    bundled: list[Example], real: list[Example], shares: tuple[float, ...] = SHARES
) -> dict[str, Any]:
    """Out-of-fold macro-F1 (and each intent's F1) on `real` for each share of it trained on."""
    from sklearn.metrics import f1_score
    from sklearn.model_selection import StratifiedKFold

    vectors = _encode(bundled + real)
    bundled_vectors, real_vectors = vectors[: len(bundled)], vectors[len(bundled) :]
    bundled_texts = [e.text for e in bundled]
    bundled_labels = [e.label.value for e in bundled]
    texts = [e.text for e in real]
    labels = np.array([e.label.value for e in real])
    intents = sorted({str(label) for label in labels})
    rng = np.random.default_rng(DEFAULT_SEED)
    folds = list(
        StratifiedKFold(FOLDS, shuffle=True, random_state=DEFAULT_SEED).split(texts, labels)
    )
    rows = []
    for share in shares:
        predicted = np.empty(len(real), dtype=object)
        for train, held in folds:
            used = rng.permutation(train)[: round(share * len(train))]
            head = CueHead(seed=DEFAULT_SEED).fit(
                bundled_texts + [texts[i] for i in used],
                np.vstack([bundled_vectors, real_vectors[used]]),
                bundled_labels + [str(labels[i]) for i in used],
            )
            probabilities = head.predict_proba([texts[i] for i in held], real_vectors[held])
            predicted[held] = np.asarray(head.classes_)[probabilities.argmax(axis=1)]
        per_intent = f1_score(labels, predicted.astype(str), labels=intents, average=None)
        rows.append(
            {
                "share": share,
                "real_rows_trained_on": round(share * len(real) * (FOLDS - 1) / FOLDS),
                "macro_f1": round(float(np.mean(per_intent)), 4),
                "f1": {i: round(float(f), 4) for i, f in zip(intents, per_intent, strict=True)},
            }
        )
    return {
        "bundled_rows": len(bundled),
        "real_rows": len(real),
        "real_rows_by_intent": {i: int((labels == i).sum()) for i in intents},
        "folds": FOLDS,
        "curve": rows,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nf_cats", type=Path, help="NF-CATS's train_valid_human.jsonl")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    parser.add_argument(
        "--split",
        choices=("train", "all"),
        default="train",
        help="NF-CATS's rows to cross-validate over: its train split, or train and valid",
    )
    args = parser.parse_args(argv)
    bundled = load_examples(bundled_data_dir() / "train.jsonl")
    report = learning_curve(bundled, nf_cats.training_examples(args.nf_cats, args.split))
    report["split"] = args.split
    for row in report["curve"]:
        print(
            f"{row['real_rows_trained_on']:5d} real rows: macro-F1 {row['macro_f1']:.3f}",
            row["f1"],
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        recorded = {**report, "run": run_record()}
        args.out.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
