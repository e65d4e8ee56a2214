"""Optional natural-language inference (transformers sequence classification) from a local dir.

Off unless `RAGBUS_NLI_PATH` is set. The model is a cross-encoder over (premise, hypothesis)
pairs whose `config.id2label` names an entailment class (`entailment`, `ENTAILMENT`, …): the
critic asks it how likely a cited chunk entails an answer sentence. torch and transformers are
imported by the loader only, so a critic without an NLI model stays as light as before.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infra.logging import get_logger
from infra.settings import Settings
from infra.threads import cap_torch_threads

log = get_logger(__name__)

BATCH_SIZE = 16
MAX_LENGTH = 512

_NEGATED = re.compile(r"(not|non|no)[\W_]*entail")


def entailment_index(id2label: Mapping[int | str, str]) -> int:
    """The class index whose label names entailment (case-insensitive "entail").

    A negated label (`not_entailment`, as in two-way RTE/QNLI models) is the other class, not
    this one. No entailment label, or more than one, is an error: the model is not an NLI model
    this code can read.
    """
    found = [
        int(index)
        for index, label in id2label.items()
        if "entail" in (lowered := str(label).lower()) and not _NEGATED.search(lowered)
    ]
    if len(found) != 1:
        labels = {int(i): str(label) for i, label in id2label.items()}
        why = "no entailment label" if not found else "more than one entailment label"
        raise ValueError(
            f"{why} in config.id2label {labels}: an NLI model must name exactly one class "
            "'entailment'"
        )
    return found[0]


class NliModel:
    """P(entailment | premise, hypothesis) for each pair: the softmax of the classifier's logits.

    One lock serialises calls into the model (torch modules are not meant to run concurrent
    forward passes); `aentailment` runs `entailment` in a thread, off the event loop.
    """

    def __init__(self, model: Any, tokenizer: Any, name: str) -> None:
        self._model = model
        self._tokenizer = tokenizer
        self._lock = threading.Lock()
        self.name = name
        self.entailment_label = entailment_index(model.config.id2label)
        self.max_length = min(int(getattr(tokenizer, "model_max_length", MAX_LENGTH)), MAX_LENGTH)

    @classmethod
    def from_path(cls, path: Path) -> NliModel:
        """Tokenizer and model from `path`, on CPU in fp32, in eval mode, offline."""
        if not path.is_dir():
            raise FileNotFoundError(f"NLI model directory not found: {path}")
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(str(path), local_files_only=True)
        model.to("cpu").float().eval()
        return cls(model, tokenizer, name=path.name)

    def entailment(self, premises: Sequence[str], hypotheses: Sequence[str]) -> list[float]:
        """The probability that each premise entails its hypothesis, in [0, 1], in order."""
        if len(premises) != len(hypotheses):
            raise ValueError(f"{len(premises)} premises for {len(hypotheses)} hypotheses")
        import torch

        out: list[float] = []
        for start in range(0, len(premises), BATCH_SIZE):
            batch = slice(start, start + BATCH_SIZE)
            inputs = self._tokenizer(
                list(premises[batch]),
                list(hypotheses[batch]),
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            )
            with self._lock, torch.inference_mode():
                logits = self._model(**inputs).logits
            probs = torch.softmax(logits.float(), dim=-1)[:, self.entailment_label]
            out.extend(float(p) for p in probs.tolist())
        return out

    async def aentailment(self, premises: Sequence[str], hypotheses: Sequence[str]) -> list[float]:
        return await asyncio.to_thread(self.entailment, premises, hypotheses)


def load_nli(settings: Settings) -> NliModel | None:
    """The configured NLI model, torch's threads capped at this process's share of the cores;
    None when none is configured."""
    if settings.nli_path is None:
        return None
    cap_torch_threads(settings)
    model = NliModel.from_path(settings.nli_path)
    log.info("nli_loaded", path=str(settings.nli_path), entailment_label=model.entailment_label)
    return model
