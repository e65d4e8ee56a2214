"""`ragbus`: run the services, ingest documents, ask questions, benchmark, and export specs."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from enum import StrEnum
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any

import structlog
import typer
from rich.console import Console

from api.launcher import UP_PARENT, WORKER_KINDS, embedded_layout_problem, serve
from contracts.enums import Intent
from infra.errors import StartupError
from infra.logging import configure_logging
from infra.settings import Settings

app = typer.Typer(
    help="ragbus: event-driven agentic RAG over NATS JetStream.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
errors = Console(stderr=True)


class AskMode(StrEnum):
    ANSWER = "answer"
    RESEARCH = "research"
    RETRIEVE = "retrieve"


WorkerKind = StrEnum("WorkerKind", [(kind, kind) for kind in WORKER_KINDS])  # type: ignore[misc]

DEFAULT_API = "http://127.0.0.1:8000"
DEMO_QUESTION = "Why did the Americans build a lock canal, and who designed the Gatun Locks?"

ApiUrl = Annotated[str, typer.Option("--api", envvar="RAGBUS_API_URL", help="API base URL.")]
Token = Annotated[
    str | None, typer.Option("--token", envvar="RAGBUS_API_TOKEN", help="Bearer token.")
]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Show logs on the terminal.")]


def main() -> None:
    app()


# -- logging -----------------------------------------------------------------------------


def _server_logging(settings: Settings) -> None:
    configure_logging(settings.log_level, settings.log_json)


def _interactive_logging(settings: Settings, verbose: bool) -> None:
    """Interactive commands keep the terminal for their own output; our logs go to a file."""
    if verbose:
        configure_logging(settings.log_level, json=False)
        return
    configure_logging(settings.log_level, settings.log_json)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    log_file = (settings.data_dir / "ragbus.log").open("a", encoding="utf-8")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=log_file))
    # FastStream and uvicorn attach their own terminal handlers to stdlib loggers as
    # brokers start; only the global switch keeps them quiet.
    logging.disable(logging.CRITICAL)


# -- services ----------------------------------------------------------------------------


def _serve(
    *,
    api: bool,
    orchestrator: bool,
    workers: tuple[str, ...],
    child_workers: tuple[str, ...] = (),
) -> None:
    settings = Settings()
    _server_logging(settings)
    try:
        asyncio.run(
            serve(
                settings,
                api=api,
                orchestrator=orchestrator,
                workers=workers,
                child_workers=child_workers,
            )
        )
    except StartupError as exc:  # a missing service, an unmigrated store: say so, no traceback
        typer.secho(f"ragbus: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from exc


@app.command()
def up() -> None:
    """Run the API, the orchestrator and every worker kind: on two cores or more, the API,
    saga and classifier here and the other workers in a child process (RAGBUS_UP_PROCESSES)."""
    processes = Settings().up_processes or (2 if (os.cpu_count() or 1) >= 2 else 1)
    if processes == 1:
        _serve(api=True, orchestrator=True, workers=WORKER_KINDS)
        return
    child = tuple(kind for kind in WORKER_KINDS if kind not in UP_PARENT)
    _serve(api=True, orchestrator=True, workers=UP_PARENT, child_workers=child)


@app.command("api")
def api_command() -> None:
    """Run the HTTP API only."""
    _serve(api=True, orchestrator=False, workers=())


@app.command()
def orchestrator() -> None:
    """Run the saga orchestrator only (run several for scale-out)."""
    _serve(api=False, orchestrator=True, workers=())


@app.command()
def worker(
    kinds: Annotated[list[WorkerKind], typer.Argument(help="The worker kinds to run.")],
) -> None:
    """Run worker kinds in this process (run several processes for scale-out)."""
    chosen = tuple(dict.fromkeys(str(k) for k in kinds))
    problem = embedded_layout_problem(Settings(), chosen)
    if problem is not None:
        typer.secho(f"ragbus: {problem}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    _serve(api=False, orchestrator=False, workers=chosen)


@app.command()
def ping(timeout: Annotated[float, typer.Option(help="Seconds to wait.")] = 3.0) -> None:
    """Exit 0 when NATS JetStream answers: a container healthcheck for workers."""
    import nats

    async def check() -> None:
        nc = await nats.connect(Settings().nats_url, connect_timeout=timeout, allow_reconnect=False)
        try:
            await nc.jetstream().account_info()
        finally:
            await nc.close()

    try:
        asyncio.run(asyncio.wait_for(check(), timeout))
    except Exception as exc:
        errors.print(f"NATS unreachable: {type(exc).__name__}: {exc}")
        raise typer.Exit(1) from None
    console.print("ok")


# -- producers and clients ---------------------------------------------------------------


@app.command()
def ingest(
    path: Annotated[Path, typer.Argument(exists=True, help="A file or a directory of documents.")],
    namespace: Annotated[str | None, typer.Option(help="Put every document here.")] = None,
    job_id: Annotated[str | None, typer.Option(help="Job id (default: a new one).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for completion.")] = 600.0,
    verbose: Verbose = False,
) -> None:
    """Publish documents as an ingest job and follow it until it completes."""
    from api.ingest_job import describe, ingest_and_follow
    from infra.runtime.ingest_producer import DocumentTooLarge, load_documents

    settings = Settings()
    _interactive_logging(settings, verbose)
    documents = list(load_documents(path))
    if namespace:
        documents = [doc.model_copy(update={"namespace": namespace}) for doc in documents]
    if not documents:
        errors.print(f"no documents found in {path}")
        raise typer.Exit(1)
    try:
        _, final = asyncio.run(
            ingest_and_follow(settings, documents, console, job_id=job_id, timeout_s=timeout)
        )
    except DocumentTooLarge as exc:
        errors.print(f"nothing was published: {exc}")
        raise typer.Exit(1) from None
    if final is None or final.get("status") != "completed":
        errors.print(f"ingest did not complete: {final or 'no progress events'}")
        raise typer.Exit(1)
    console.print(describe(final))


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    intent: Annotated[Intent | None, typer.Option(help="Skip classification.")] = None,
    top_k: Annotated[int | None, typer.Option(min=1, max=50, help="Chunks to use.")] = None,
    namespace: Annotated[
        list[str] | None, typer.Option(help="Namespace to search (repeatable).")
    ] = None,
    mode: Annotated[
        AskMode,
        typer.Option(
            help="`answer`; `research`: plan sub-questions, answer each as a child request, "
            "and write a cited report; `retrieve`: rankings only.",
        ),
    ] = AskMode.ANSWER,
    session: Annotated[
        str | None,
        typer.Option(
            help="A conversation: follow-ups are understood from its earlier turns, and what "
            "it taught is recalled (`GET /v1/sessions/<id>` shows it).",
        ),
    ] = None,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
    verbose: Verbose = False,
) -> None:
    """Ask over HTTP: phases with their durations, the answer as it streams, its sources."""
    from api.ask import ask_question
    from api.client import ApiError, RagbusClient

    _interactive_logging(Settings(), verbose)

    async def run() -> str | None:
        async with RagbusClient(api, token=token) as client:
            return await ask_question(
                client,
                question,
                console,
                intent=intent.value if intent else None,
                top_k=top_k,
                namespaces=namespace,
                session_id=session,
                mode=mode.value,
            )

    try:
        status = asyncio.run(run())
    except ApiError as exc:
        errors.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from None
    if status != "completed":
        raise typer.Exit(1)


@app.command("eval")
def eval_command(
    beir: Annotated[Path, typer.Option(exists=True, file_okay=False, help="A BEIR directory.")],
    split: Annotated[str, typer.Option(help="qrels/<split>.tsv to score.")] = "test",
    namespace: Annotated[str | None, typer.Option(help="Default: the directory's name.")] = None,
    skip_ingest: Annotated[bool, typer.Option(help="Reuse what is already indexed.")] = False,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1)] = 4,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N queries.")] = None,
    out: Annotated[Path | None, typer.Option(help="JSON report.")] = None,
    run: Annotated[Path | None, typer.Option(help="Fused ranking, TREC run format.")] = None,
    run_channel: Annotated[
        list[str] | None,
        typer.Option(help="NAME=FILE: one channel's ranking, TREC run format (repeatable)."),
    ] = None,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
    verbose: Verbose = False,
) -> None:
    """Score retrieval on a BEIR data set through the running pipeline (nDCG@10, Recall, MRR)."""
    from api.client import RagbusClient
    from api.evaluation.harness import evaluate_beir
    from api.evaluation.metrics import write_trec_run

    settings = Settings()
    _interactive_logging(settings, verbose)

    async def go() -> tuple[dict[str, Any], Any]:
        async with RagbusClient(api, token=token) as client:
            return await evaluate_beir(
                settings,
                client,
                beir,
                console,
                split=split,
                namespace=namespace,
                ingest=not skip_ingest,
                concurrency=concurrency,
                limit=limit,
            )

    report, result = asyncio.run(go())
    console.print_json(json.dumps(report))
    if out:
        _save_json(report, out)
    if run:
        write_trec_run(result.fused, str(run), "ragbus-fused")
    for spec in run_channel or []:
        name, _, path = spec.partition("=")
        if name not in result.channels or not path:
            errors.print(
                f"--run-channel wants NAME=FILE with NAME one of "
                f"{', '.join(sorted(result.channels))}; got {spec!r}"
            )
            raise typer.Exit(2)
        write_trec_run(result.channels[name], path, f"ragbus-{name}")


IntentData = Annotated[
    Path | None,
    typer.Option("--data", exists=True, dir_okay=False, help="JSONL of {text, label}."),
]


@app.command("train-intent")
def train_intent(
    data: IntentData = None,
    out: Annotated[
        Path | None, typer.Option(help="Model directory (default: <data dir>/intent-model).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for every random choice.")] = 42,
    fine_tune_body: Annotated[
        bool,
        typer.Option(help="Run SetFit's contrastive phase: more accurate, encodes twice."),
    ] = False,
    iterations: Annotated[int, typer.Option(min=1, help="Contrastive iterations.")] = 2,
    per_class: Annotated[
        int | None, typer.Option(min=1, help="Only the first N examples of each intent.")
    ] = None,
    verbose: Verbose = False,
) -> None:
    """Train the SetFit intent model on the local MiniLM (offline, seeded) and save it with
    its meta.json. Default data: the bundled train split."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from workers.classify.dataset import (
        TRAIN_FILE,
        DatasetError,
        bundled_data_dir,
        first_per_class,
        load_examples,
    )
    from workers.classify.model_meta import model_dir
    from workers.classify.training import shared_body, train_intent_model

    settings = Settings()
    _interactive_logging(settings, verbose)
    try:
        examples = load_examples(data or bundled_data_dir() / TRAIN_FILE)
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


@app.command("eval-intent")
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

    from infra.retrieval.encoder import Encoder, load_encoder
    from workers.classify.classifier import IntentClassifier
    from workers.classify.dataset import TEST_FILE, DatasetError, bundled_data_dir, load_examples
    from workers.classify.evaluation import evaluate, print_report
    from workers.classify.model_meta import META_FILE, model_dir

    settings = Settings()
    _interactive_logging(settings, verbose)
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
        _save_json(report, out)
        console.print(f"wrote {out}")


@app.command("migrate-vectors")
def migrate_vectors(verbose: Verbose = False) -> None:
    """Move vectors kept by qdrant-client's local mode (`<data dir>/qdrant`, before Qdrant
    Edge) into the embedded store: every point kept, each chunk's sentence vectors added, the
    old directory renamed, not deleted."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from infra.retrieval.encoder import load_encoder
    from infra.retrieval.vectors import open_vector_store
    from infra.retrieval.vectors.legacy import legacy_namespaces, migrate

    settings = Settings()
    _interactive_logging(settings, verbose)
    if settings.qdrant_url:
        errors.print("RAGBUS_QDRANT_URL is set: the vectors live in that server, nothing to move")
        raise typer.Exit(1)
    found = legacy_namespaces(settings)
    if not found:
        console.print(f"nothing to migrate: no local-mode vectors in {settings.qdrant_path}")
        return
    console.print(f"migrating {', '.join(found)} from {settings.qdrant_path}")
    encoder = load_encoder(settings)
    store = open_vector_store(settings, encoder.dim, migrating=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    try:
        with Progress(*columns, console=console) as progress:
            tasks: dict[str, Any] = {}

            def advance(namespace: str, done: int, total: int) -> None:
                if namespace not in tasks:
                    tasks[namespace] = progress.add_task(namespace, total=total)
                progress.update(tasks[namespace], completed=done)

            report = migrate(settings, store, encoder, progress=advance)
    finally:
        store.close()
    moved = ", ".join(f"{ns}: {n} chunks" for ns, n in report.namespaces.items())
    console.print(
        f"migrated {moved} ({report.sentences} sentence vectors) in {report.seconds:g} s; "
        f"the old directory is kept at {report.kept_at}"
    )


@app.command()
def demo(
    question: Annotated[str, typer.Option(help="The question to ask.")] = DEMO_QUESTION,
    data_dir: Annotated[Path | None, typer.Option(help="Where stores and services live.")] = None,
    port: Annotated[int | None, typer.Option(help="API port.")] = None,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve/--no-serve", help="Keep serving the API and the web page afterwards."
        ),
    ] = True,
    verbose: Verbose = False,
) -> None:
    """Start everything, ingest the bundled Panama Canal corpus, ask a question; then keep
    serving the web page until Ctrl-C (`--no-serve`: stop)."""
    from api.demo import run_demo

    overrides: dict[str, Any] = {"data_dir": data_dir, "api_port": port}
    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    _interactive_logging(settings, verbose)
    sample = Path(str(files("api").joinpath("sample")))
    code = asyncio.run(run_demo(settings, sample, question, console, keep_serving=serve))
    raise typer.Exit(code)


# -- specifications ----------------------------------------------------------------------


def _save_json(report: dict[str, Any], out: Path) -> None:
    """A command's report as indented JSON, its directory made when missing."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def _write(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text + "\n")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n", encoding="utf-8")
    errors.print(f"wrote {out}")


OutFile = Annotated[Path | None, typer.Option("--out", "-o", help="File (default: stdout).")]


@app.command()
def openapi(out: OutFile = None) -> None:
    """Write the HTTP API's OpenAPI document (JSON)."""
    from api.app import create_app

    _write(json.dumps(create_app(Settings()).openapi(), indent=2), out)


@app.command()
def asyncapi(
    out: OutFile = None,
    yaml: Annotated[bool, typer.Option("--yaml", help="YAML instead of JSON.")] = False,
) -> None:
    """Write the bus's AsyncAPI document: every subject the orchestrator and workers use."""
    from faststream.specification import AsyncAPI

    from api.launcher import build_broker
    from infra.runtime.bus import Bus, create_broker
    from infra.runtime.resources import Resources

    settings = Settings()
    runtime = Resources(settings, Bus.from_settings(create_broker(settings), settings))
    build_broker(runtime, orchestrator=True, workers=WORKER_KINDS)
    spec = AsyncAPI(
        runtime.bus.broker,
        title="ragbus",
        version="0.1.0",
        description="Queries, commands, results, caller events and ingestion on NATS JetStream.",
    ).to_specification()
    _write(spec.to_yaml() if yaml else spec.to_json(), out)


from api import cli_bench as _cli_bench  # noqa: E402  (registers the `bench*` commands)
from api import cli_chaos as _cli_chaos  # noqa: E402  (registers `chaos`)
from api import cli_tenants as _cli_tenants  # noqa: E402  (registers `tenant`)

__all__ = ["_cli_bench", "_cli_chaos", "_cli_tenants", "app", "main"]
