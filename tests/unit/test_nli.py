"""The optional NLI model: it loads from a local directory (a tiny model the tests build), finds
its entailment label, gives probabilities, and the critic uses it only when one is configured —
a broken one leaves the critique as it would be without it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from faststream.nats import NatsBroker

from contracts import subjects as sj
from contracts.commands import CriticCommand
from contracts.enums import Intent, Step
from contracts.models import RetrievedChunk
from contracts.results import CriticResult
from engines.critic.scoring import score_answer
from infra.retrieval.nli import NliModel, entailment_index, load_nli
from infra.runtime.bus import Bus
from infra.runtime.resources import Resources
from infra.settings import Settings
from tests.unit.conftest import WorkerHarness, worker_harness
from tests.unit.fakes import FakeEncoder
from workers.critic import create_router

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
QUERY = "Where does JetStream store messages?"
CONTEXTS = [
    RetrievedChunk(chunk_id="a", document_id="d-a", text="JetStream stores messages on disk."),
    RetrievedChunk(chunk_id="b", document_id="d-b", text="Redis keeps the saga state."),
]
PARAPHRASE = "Persisted streams live in files [1]."  # no content word shared with chunk a
PREMISES = ["Statins lower LDL cholesterol.", "The canal links two oceans.", "Bake the bread."]
HYPOTHESES = ["Statins reduce cholesterol.", "Bread is baked.", "The bread is baked at noon."]


class FixedNli:
    """An NLI double: the same probability for every pair, and a record of the pairs."""

    name = "fixed"

    def __init__(self, p: float) -> None:
        self.p = p
        self.pairs: list[tuple[str, str]] = []

    async def aentailment(self, premises: Sequence[str], hypotheses: Sequence[str]) -> list[float]:
        self.pairs.extend(zip(premises, hypotheses, strict=True))
        return [self.p] * len(premises)


class BrokenNli:
    name = "broken"

    async def aentailment(self, premises: Sequence[str], hypotheses: Sequence[str]) -> list[float]:
        raise RuntimeError("the NLI model ran out of memory")


@pytest.mark.parametrize(
    ("id2label", "index"),
    [
        ({0: "contradiction", 1: "neutral", 2: "entailment"}, 2),
        ({"0": "ENTAILMENT", "1": "NEUTRAL", "2": "CONTRADICTION"}, 0),
        ({0: "entailment", 1: "not_entailment"}, 0),  # two-way RTE / QNLI models
        ({0: "not entailment", 1: "Entailed"}, 1),
    ],
)
def test_the_entailment_label_is_found(id2label: dict[Any, str], index: int) -> None:
    assert entailment_index(id2label) == index


@pytest.mark.parametrize(
    ("id2label", "why"),
    [
        ({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, "no entailment label"),
        ({0: "entailment", 1: "entails"}, "more than one entailment label"),
    ],
)
def test_a_model_without_one_entailment_label_is_refused(
    id2label: dict[Any, str], why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        entailment_index(id2label)


def test_the_nli_model_loads_and_gives_probabilities(tiny_nli: Path, tmp_path: Path) -> None:
    assert load_nli(Settings(data_dir=tmp_path)) is None
    model = load_nli(Settings(data_dir=tmp_path, nli_path=tiny_nli))
    assert isinstance(model, NliModel)
    assert model.entailment_label == 2 and model.name == "tiny-nli"
    probs = model.entailment(PREMISES, HYPOTHESES)
    assert len(probs) == len(PREMISES)
    assert all(isinstance(p, float) and 0.0 <= p <= 1.0 for p in probs)
    assert len(set(probs)) > 1  # the pairs are told apart
    one = [model.entailment([p], [h])[0] for p, h in zip(PREMISES, HYPOTHESES, strict=True)]
    assert one == pytest.approx(probs, abs=1e-5)  # padding in a batch changes nothing
    many = model.entailment(PREMISES * 7, HYPOTHESES * 7)  # more than one batch
    assert many == pytest.approx(probs * 7, abs=1e-5)
    assert model.entailment([], []) == []
    with pytest.raises(ValueError, match="premises"):
        model.entailment(PREMISES, HYPOTHESES[:1])
    with pytest.raises(FileNotFoundError, match="not found"):
        load_nli(Settings(data_dir=tmp_path, nli_path=tmp_path / "nowhere"))


def test_a_classifier_without_an_entailment_label_does_not_load(
    tiny_nli: Path, tmp_path: Path
) -> None:
    copy = shutil.copytree(tiny_nli, tmp_path / "sentiment")
    config = json.loads((copy / "config.json").read_text())
    config["id2label"] = {"0": "negative", "1": "neutral", "2": "positive"}
    config["label2id"] = {"negative": 0, "neutral": 1, "positive": 2}
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="no entailment label"):
        NliModel.from_path(copy)


async def test_resources_give_the_nli_model_only_when_configured(
    tiny_nli: Path, tmp_path: Path
) -> None:
    off = Resources(Settings(data_dir=tmp_path), Bus(NatsBroker()))
    assert await off.nli() is None
    on = Resources(Settings(data_dir=tmp_path, nli_path=tiny_nli), Bus(NatsBroker()))
    first = await on.nli()
    assert first is not None and await on.nli() is first


async def test_entailment_can_raise_a_sentences_support_but_never_lower_it() -> None:
    args = (QUERY, PARAPHRASE, {1: "a"}, CONTEXTS, FakeEncoder())
    plain = await score_answer(*args)
    assert plain.nli is None and plain.grounding < 0.5
    assert set(plain.as_dict()) == {"grounding", "citation_validity", "coverage", "retrieval"}

    sure = FixedNli(0.97)
    raised = await score_answer(*args, nli=sure)
    assert sure.pairs == [(CONTEXTS[0].text, "Persisted streams live in files.")]
    assert raised.grounding == pytest.approx(0.97)
    assert raised.nli == pytest.approx(0.97)
    assert raised.as_dict()["nli"] == pytest.approx(0.97)
    assert raised.confidence > plain.confidence

    doubtful = await score_answer(*args, nli=FixedNli(0.0))
    assert doubtful.grounding == plain.grounding and doubtful.nli == 0.0


async def test_uncited_sentences_are_not_sent_to_the_model() -> None:
    nli = FixedNli(1.0)
    answer = "JetStream stores messages on disk. Redis keeps state [2]."
    scores = await score_answer(QUERY, answer, {2: "b"}, CONTEXTS, FakeEncoder(), nli=nli)
    assert nli.pairs == [(CONTEXTS[1].text, "Redis keeps state.")]
    assert scores.nli == pytest.approx(0.5)  # the uncited sentence scores 0
    assert scores.grounding == pytest.approx(0.5)


async def test_a_failing_model_leaves_the_scores_it_would_have_had() -> None:
    args = (QUERY, PARAPHRASE, {1: "a"}, CONTEXTS, FakeEncoder())
    plain = await score_answer(*args)
    broken = await score_answer(*args, nli=BrokenNli())
    assert broken == plain  # nli is None, the other signals equal
    assert broken.nli is None and "out of memory" in str(broken.nli_error)
    assert "nli" not in broken.as_dict()


def _command(request_id: str) -> CriticCommand:
    return CriticCommand(
        request_id=request_id,
        query=QUERY,
        intent=Intent.FACTUAL,
        answer="JetStream stores messages on disk [1]. Redis keeps the saga state [2].",
        citations={1: "a", 2: "b"},
        contexts=CONTEXTS,
        attempts_left=1,
    )


async def _critique(h: WorkerHarness, cmd: CriticCommand) -> tuple[CriticResult, dict[str, Any]]:
    await h.publish(cmd, sj.cmd_subject(Step.CRITIC), sj.STREAM_CMD)
    [body] = h.on("rag.res.")
    assert h.on("rag.dlq.") == []
    completed = h.on("rag.events.")[-1]["data"]
    assert completed["status"] == "completed"
    return CriticResult.model_validate(body), completed["metadata"]


async def test_the_critic_scores_entailment_when_configured(tiny_nli: Path, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, nli_path=tiny_nli)
    async with worker_harness(create_router, settings, encoder=FakeEncoder()) as h:
        result, metadata = await _critique(h, _command("req-nli"))
    assert result.verdict in {"accept", "retry"}
    assert 0.0 <= result.scores["nli"] <= 1.0
    assert result.scores["grounding"] == pytest.approx(1.0)  # lexical support stays
    assert metadata["nli"] == "tiny-nli" and "nli_error" not in metadata
    assert metadata["scores"] == result.scores


async def test_the_critic_is_unchanged_without_an_nli_model(tmp_path: Path) -> None:
    async with worker_harness(create_router, Settings(data_dir=tmp_path), FakeEncoder()) as h:
        result, metadata = await _critique(h, _command("req-plain"))
    assert set(result.scores) == {"grounding", "citation_validity", "coverage", "retrieval"}
    assert "nli" not in metadata and "nli_error" not in metadata


async def test_an_nli_model_that_cannot_load_is_skipped(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, nli_path=tmp_path / "no-such-nli")
    async with worker_harness(create_router, settings, FakeEncoder()) as h:
        result, metadata = await _critique(h, _command("req-noload"))
    assert result.verdict == "accept"
    assert "nli" not in result.scores and "nli" not in metadata
    assert "no-such-nli" in metadata["nli_error"]


async def test_an_nli_model_that_fails_is_skipped(tiny_nli: Path, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, nli_path=tiny_nli)
    async with worker_harness(create_router, settings, FakeEncoder()) as h:

        async def broken() -> BrokenNli:
            return BrokenNli()

        h.resources.nli = broken  # type: ignore[method-assign,assignment]
        result, metadata = await _critique(h, _command("req-broken"))
    assert result.verdict == "accept"
    assert "nli" not in result.scores
    assert metadata["nli"] == "broken"
    assert "out of memory" in metadata["nli_error"]


def test_the_critic_imports_no_model_library_until_asked() -> None:
    code = (
        "import sys, workers.critic, infra.runtime.resources, infra.retrieval.nli; "
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
