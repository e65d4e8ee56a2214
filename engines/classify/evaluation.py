"""Score the classification chain on labelled queries: accuracy, macro-F1, per-class
precision/recall/F1, the confusion matrix, how well the confidence is calibrated, and
single-query latency.

It measures what the worker does (override-free `IntentClassifier.classify`, encoding
included), not the bare model, so rules and guards count too. Metrics are scikit-learn's.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from contracts.enums import Intent
from engines.classify.classifier import IntentClassifier
from engines.classify.dataset import Example
from engines.classify.query_form import is_keyword_query
from infra.retrieval.intent_profiles import LOW_CONFIDENCE

Tick = Callable[[], None]


async def evaluate(
    classifier: IntentClassifier, examples: Sequence[Example], tick: Tick | None = None
) -> dict[str, Any]:
    """Classify every example once, timing each; returns the JSON report."""
    from sklearn.metrics import (
        accuracy_score,
        confusion_matrix,
        f1_score,
        precision_recall_fscore_support,
    )

    await classifier.classify("warm up the encoder, the model and the prototypes")
    gold: list[str] = []
    predicted: list[str] = []
    forms: list[str] = []
    methods: Counter[str] = Counter()
    confidences: list[float] = []
    latencies: list[float] = []
    for example in examples:
        started = time.perf_counter()
        found = await classifier.classify(example.text)
        latencies.append((time.perf_counter() - started) * 1000)
        gold.append(example.label.value)
        predicted.append(found.intent.value)
        confidences.append(found.confidence)
        forms.append("keyword" if is_keyword_query(example.text) else "question")
        methods[found.method] += 1
        if tick:
            tick()

    present = set(gold) | set(predicted)
    labels = [i.value for i in Intent if i.value in present]
    precision, recall, f1, support = precision_recall_fscore_support(
        gold, predicted, labels=labels, zero_division=0
    )
    matrix = confusion_matrix(gold, predicted, labels=labels)
    model = await classifier.model()
    return {
        "n": len(gold),
        "accuracy": round(float(accuracy_score(gold, predicted)), 4),
        "macro_f1": round(
            float(f1_score(gold, predicted, labels=labels, average="macro", zero_division=0)), 4
        ),
        # over the intents the set labels: a set without navigation, summary or tool rows
        # (real questions, say) is not scored on them, only on its own
        "macro_f1_labelled": round(
            float(
                f1_score(
                    gold,
                    predicted,
                    labels=[i.value for i in Intent if i.value in set(gold)],
                    average="macro",
                    zero_division=0,
                )
            ),
            4,
        ),
        "intervals": intervals(gold, predicted),
        "per_class": {
            label: {
                "precision": round(float(p), 4),
                "recall": round(float(r), 4),
                "f1": round(float(f), 4),
                "support": int(s),
            }
            for label, p, r, f, s in zip(labels, precision, recall, f1, support, strict=True)
        },
        "confusion": {
            label: {other: int(n) for other, n in zip(labels, row, strict=True)}
            for label, row in zip(labels, matrix, strict=True)
        },
        "by_form": by_form(gold, predicted, forms),
        "calibration": calibration(
            [g == p for g, p in zip(gold, predicted, strict=True)], confidences
        ),
        "methods": dict(methods.most_common()),
        "model": model.meta.version if model else None,
        "latency_ms": latency_summary(latencies),
    }


def intervals(gold: Sequence[str], predicted: Sequence[str]) -> dict[str, list[float]]:
    """95% intervals of the accuracy and of the macro-F1 over the set's own intents: a
    bootstrap over the rows (scipy's, percentile, 2,000 resamples, seeded). A class with a few
    rows moves the macro-F1 by several points a row, and a figure read against a target
    should say so. The statistics take every resample at once (`macro_f1_rows`, scikit-learn's
    macro-F1 in numpy): scikit-learn's own, called 4,000 times, took seconds a report."""
    from scipy.stats import bootstrap

    labels = [i.value for i in Intent if i.value in set(gold)]
    if len(gold) < 2:
        return {}
    codes = {label: code for code, label in enumerate(sorted(set(gold) | set(predicted)))}
    data = (
        np.asarray([codes[g] for g in gold], dtype=np.int16),
        np.asarray([codes[p] for p in predicted], dtype=np.int16),
    )
    counted = [codes[label] for label in labels]

    def accuracy(g: np.ndarray, p: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(np.mean(g == p, axis=axis))

    def macro_f1(g: np.ndarray, p: np.ndarray, axis: int = -1) -> np.ndarray:
        return macro_f1_rows(g, p, counted)

    out = {}
    for name, statistic in (("accuracy", accuracy), ("macro_f1_labelled", macro_f1)):
        found = bootstrap(
            data,
            statistic,
            paired=True,
            vectorized=True,
            batch=BOOTSTRAP_BATCH,
            n_resamples=2000,
            method="percentile",
            rng=np.random.default_rng(0),
        ).confidence_interval
        out[name] = [round(float(found.low), 4), round(float(found.high), 4)]
    return out


BOOTSTRAP_BATCH = 250
"""Resamples scored at once: 250 × the rows as int16, a few MB for a set of thousands."""


def macro_f1_rows(gold: np.ndarray, predicted: np.ndarray, labels: Sequence[int]) -> np.ndarray:
    """Macro-F1 over `labels` of each row of `gold` and `predicted` (coded labels, the last
    axis the queries), as scikit-learn's `f1_score(average="macro", zero_division=0)` counts
    it: F1 = 2·TP / (2·TP + FP + FN) per label, 0 where a label is neither gold nor
    predicted."""
    scores = []
    for label in labels:
        is_gold, is_predicted = gold == label, predicted == label
        tp = np.sum(is_gold & is_predicted, axis=-1)
        wrong = np.sum(is_gold ^ is_predicted, axis=-1)
        denominator = 2 * tp + wrong
        scores.append(np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0))
    return np.asarray(np.mean(scores, axis=0))


def by_form(gold: Sequence[str], predicted: Sequence[str], forms: Sequence[str]) -> dict[str, Any]:
    """Accuracy of keyword queries and of questions apart (`query_form.is_keyword_query`):
    real users type keywords, and the models learn mostly from questions."""
    out: dict[str, Any] = {}
    for form in ("keyword", "question"):
        picked = [g == p for g, p, f in zip(gold, predicted, forms, strict=True) if f == form]
        if picked:
            out[form] = {"n": len(picked), "accuracy": round(sum(picked) / len(picked), 4)}
    return out


BANDS = (0.0, LOW_CONFIDENCE, 0.6, 0.75, 0.9, 1.0)
"""Confidence bands: the first is where the router uses the prior's weights instead."""


def calibration(right: Sequence[bool], confidences: Sequence[float]) -> dict[str, Any]:
    """How far the confidence is from the share right: per band (`BANDS`), the rows, their
    mean confidence and their accuracy, and the expected calibration error (the bands' gaps
    weighted by their rows). The router trusts a route by its confidence, so a model whose
    0.9 is right half the time routes confidently wrong."""
    bands: list[dict[str, Any]] = []
    gap = 0.0
    for low, high in pairwise(BANDS):
        last = high == BANDS[-1]
        picked = [
            (ok, c)
            for ok, c in zip(right, confidences, strict=True)
            if low <= c < high or (last and c == high)
        ]
        if not picked:
            continue
        accuracy = sum(ok for ok, _ in picked) / len(picked)
        confidence = sum(c for _, c in picked) / len(picked)
        gap += len(picked) * abs(accuracy - confidence)
        bands.append(
            {
                "from": low,
                "to": high,
                "n": len(picked),
                "confidence": round(confidence, 4),
                "accuracy": round(accuracy, 4),
            }
        )
    below = [ok for ok, c in zip(right, confidences, strict=True) if c < LOW_CONFIDENCE]
    return {
        "bands": bands,
        "expected_calibration_error": round(gap / len(right), 4) if right else None,
        "below_the_gate": round(len(below) / len(right), 4) if right else None,
    }


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, float]:
    values = np.asarray(latencies_ms, dtype=float)
    return {
        "n": len(values),
        "p50": round(float(np.percentile(values, 50)), 2),
        "p95": round(float(np.percentile(values, 95)), 2),
        "mean": round(float(values.mean()), 2),
        "max": round(float(values.max()), 2),
    }


def print_report(report: dict[str, Any], console: Console) -> None:
    latency = report["latency_ms"]
    console.print(
        f"n={report['n']}  accuracy={report['accuracy']:.4f}  "
        f"macro-F1={report['macro_f1']:.4f} (over its labelled intents "
        f"{report.get('macro_f1_labelled', report['macro_f1']):.4f})  "
        f"model={report['model'] or 'none (zero-shot)'}"
    )
    if bounds := report.get("intervals"):
        console.print(
            "95% intervals (bootstrap over the rows): "
            + ", ".join(f"{name} {low:.3f} to {high:.3f}" for name, (low, high) in bounds.items())
        )
    console.print(
        f"latency per query: p50={latency['p50']:.1f} ms  p95={latency['p95']:.1f} ms  "
        f"(n={latency['n']})  methods: "
        + ", ".join(f"{m}={n}" for m, n in report["methods"].items())
    )
    if forms := report.get("by_form"):
        console.print(
            "by form: "
            + ", ".join(
                f"{form} queries {row['accuracy']:.3f} (n={row['n']})"
                for form, row in forms.items()
            )
        )
    if calibrated := report.get("calibration"):
        console.print(
            f"calibration: expected error {calibrated['expected_calibration_error']}, "
            f"{calibrated['below_the_gate']:.1%} below the gate ({LOW_CONFIDENCE}); "
            + ", ".join(
                f"{b['from']:g}-{b['to']:g}: {b['accuracy']:.2f} right at {b['confidence']:.2f}"
                f" (n={b['n']})"
                for b in calibrated["bands"]
            )
        )
    classes = Table(title="per class", title_justify="left")
    for column in ("intent", "precision", "recall", "f1", "support"):
        classes.add_column(column, justify="left" if column == "intent" else "right")
    for label, row in report["per_class"].items():
        classes.add_row(
            label, *(f"{row[k]:.3f}" for k in ("precision", "recall", "f1")), str(row["support"])
        )
    console.print(classes)
    labels = list(report["confusion"])
    matrix = Table(title="confusion (rows: gold, columns: predicted)", title_justify="left")
    matrix.add_column("")
    for label in labels:
        matrix.add_column(label[:6], justify="right")
    for label in labels:
        cells = report["confusion"][label]
        matrix.add_row(label, *(_cell(cells[o], o == label) for o in labels))
    console.print(matrix)


def _cell(count: int, diagonal: bool) -> str:
    if count == 0:
        return "[dim]·[/dim]"
    return f"[bold]{count}[/bold]" if diagonal else f"[red]{count}[/red]"
