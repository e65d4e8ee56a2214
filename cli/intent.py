"""`ragbus train-intent|eval-intent`: the intent model, trained and scored offline."""

from __future__ import annotations

import asyncio
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.common import Verbose, console, errors, interactive_logging, save_json
from infra.settings import Settings


def register(app: typer.Typer) -> None:
    app.command("train-intent")(train_intent)
    app.command("eval-intent")(eval_intent)


class NfCatsSplit(StrEnum):
    """NF-CATS's splits to train on (`engines.classify.nf_cats.Split`, less `valid` alone)."""

    ALL = "all"
    TRAIN = "train"


IntentData = Annotated[
    Path | None,
    typer.Option("--data", exists=True, dir_okay=False, help="JSONL of {text, label}."),
]


def train_intent(
    data: IntentData = None,
    out: Annotated[
        Path | None, typer.Option(help="Model directory (default: <data dir>/intent-model).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for every random choice.")] = 42,
    fine_tune_body: Annotated[
        bool,
        typer.Option(
            help="Run SetFit's contrastive phase and fit its head instead of the cue head: "
            "the query is then encoded twice."
        ),
    ] = False,
    iterations: Annotated[int, typer.Option(min=1, help="Contrastive iterations.")] = 2,
    per_class: Annotated[
        int | None, typer.Option(min=1, help="Only the first N examples of each intent.")
    ] = None,
    extra: Annotated[
        list[Path] | None,
        typer.Option(
            "--extra",
            exists=True,
            dir_okay=False,
            help="More labelled queries (JSONL of {text, label}) trained on beside --data; "
            "repeatable.",
        ),
    ] = None,
    nf_cats: Annotated[
        Path | None,
        typer.Option(
            "--nf-cats",
            exists=True,
            dir_okay=False,
            help="NF-CATS's rows (its train_valid_human.jsonl): its real questions, mapped to "
            "our intents (engines.classify.nf_cats), are trained on too. Default: the copy "
            "that ships (engines/classify/intent_data/nf_cats.jsonl).",
        ),
    ] = None,
    bundled_only: Annotated[
        bool,
        typer.Option(
            "--bundled-only", help="Leave NF-CATS out: train on the bundled rows (and --extra)."
        ),
    ] = False,
    nf_cats_split: Annotated[
        NfCatsSplit,
        typer.Option(
            "--nf-cats-split",
            help="Which of NF-CATS's splits --nf-cats trains on: `all` (train and valid, the "
            "shipped model) or `train` (its valid split held out, to score the model on it).",
        ),
    ] = NfCatsSplit.ALL,
    verbose: Verbose = False,
) -> None:
    """Train the intent model on the local MiniLM (offline, seeded): a head over the query's
    embedding and its cue words. Saved with its meta.json. Default data: the bundled train
    split."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from engines.classify.dataset import (
        TRAIN_FILE,
        DatasetError,
        bundled_data_dir,
        first_per_class,
        load_examples,
    )
    from engines.classify.model_meta import model_dir
    from engines.classify.nf_cats import SHIPPED
    from engines.classify.nf_cats import training_examples as nf_cats_examples
    from engines.classify.training import shared_body, train_intent_model

    settings = Settings()
    interactive_logging(settings, verbose)
    try:
        examples = load_examples(data or bundled_data_dir() / TRAIN_FILE)
        for path in extra or []:
            examples += load_examples(path)
        if not bundled_only:
            examples += nf_cats_examples(nf_cats or SHIPPED, nf_cats_split.value)
    except DatasetError as exc:
        errors.print(str(exc), style="red", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if per_class:
        examples = first_per_class(examples, per_class)
    body_path, body_name = shared_body(settings)
    target = out or model_dir(settings)
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("training the intent model", total=None)
        meta = train_intent_model(
            examples,
            target,
            body_path=body_path,
            body_name=body_name,
            seed=seed,
            fine_tune_body=fine_tune_body,
            iterations=iterations,
            stage=lambda text: progress.update(task, description=text, total=None, completed=0),
            step=lambda done, total: progress.update(task, completed=done, total=total),
        )
    console.print(
        f"intent model {meta.version}: {meta.train_size} examples, "
        f"{len(meta.labels)} intents, {meta.train_seconds:.1f} s"
    )
    console.print(f"saved to {target}", soft_wrap=True)


def eval_intent(
    data: IntentData = None,
    out: Annotated[Path | None, typer.Option(help="Write the JSON report here.")] = None,
    model: Annotated[
        Path | None, typer.Option(help="Model directory (default: <data dir>/intent-model).")
    ] = None,
    verbose: Verbose = False,
) -> None:
    """Accuracy, macro-F1, per-class scores, confusion matrix and per-query latency
    (p50/p95) of the classification chain. Default data: the bundled held-out split."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from engines.classify.classifier import IntentClassifier
    from engines.classify.dataset import TEST_FILE, DatasetError, bundled_data_dir, load_examples
    from engines.classify.evaluation import evaluate, print_report
    from engines.classify.model_meta import META_FILE, model_dir
    from infra.retrieval.encoder import Encoder, load_encoder

    settings = Settings()
    interactive_logging(settings, verbose)
    try:  # before any model loads: a bad label fails in a moment
        examples = load_examples(data or bundled_data_dir() / TEST_FILE)
    except DatasetError as exc:
        errors.print(str(exc), style="red", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    directory = model or model_dir(settings)
    if not (directory / META_FILE).is_file():
        errors.print(
            f"no intent model at {directory}: scoring zero-shot + rules (`ragbus train-intent`)"
        )
    encoder = load_encoder(settings)

    async def provide() -> Encoder:
        return encoder

    async def run() -> dict[str, Any]:
        classifier = IntentClassifier(provide, directory)
        columns = (TextColumn("classifying"), BarColumn(), MofNCompleteColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("", total=len(examples))
            return await evaluate(classifier, examples, lambda: progress.advance(task))

    report = asyncio.run(run())
    print_report(report, console)
    if out:
        save_json(report, out)
        console.print(f"wrote {out}")
