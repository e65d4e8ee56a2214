"""`ragbus bench-documents`: how faithfully and how fast ragbus reads a BEIR set kept as files
(PDFs with a text layer, and scans), against the plain text of the same documents; and
`ragbus bench-during-ingest`: the queries' p95 while a folder of files is ingested, against
idle. The measuring is `bench.documents`' and `bench.during_ingest`'; this module parses
options, drives a running stack, and prints."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cli.common import (
    DEFAULT_API,
    DEFAULT_QUERIES,
    ApiUrl,
    Concurrency,
    Duration,
    Failure,
    Queries,
    Token,
    check_api,
    console,
    save_json,
)


def register(app: typer.Typer) -> None:
    app.command("bench-documents")(bench_documents)
    app.command("bench-during-ingest")(bench_during_ingest)


def _ragbus(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cli", *args]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def _ingest(folder: Path, namespace: str) -> dict[str, Any]:
    """`ragbus ingest FOLDER` through the bus (its parse and ingest workers; it talks to NATS,
    not the API); how long."""
    started = time.perf_counter()
    done = _ragbus("ingest", str(folder), "--namespace", namespace)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise Failure(f"ragbus ingest {folder} failed: {done.stderr.strip()[-500:]}")
    return {"seconds": round(seconds, 1)}


def _ndcg(beir: Path, namespace: str, api: str, token: str | None, ingest: bool) -> float:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "eval.json"
        args = ["eval", "--beir", str(beir), "--namespace", namespace, "--out", str(out)]
        args += ["--api", api, *(["--token", token] if token else [])]
        done = _ragbus(*args, *([] if ingest else ["--skip-ingest"]))
        if done.returncode != 0:
            raise Failure(f"ragbus eval {beir} failed: {done.stderr.strip()[-500:]}")
        report = json.loads(out.read_text())
    return float(report["fused"]["ndcg@10"])


def bench_documents(
    beir: Annotated[Path, typer.Option(exists=True, file_okay=False, help="A BEIR directory.")],
    work: Annotated[
        Path,
        typer.Option(
            help="Where the rendered files and BEIR folders go (kept: reruns reuse them)."
        ),
    ] = Path(".ragbus/bench-documents"),
    scan_docs: Annotated[int, typer.Option(min=1, help="Documents in the scanned subset.")] = 500,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N documents.")] = None,
    retrieval: Annotated[
        bool,
        typer.Option(help="Also ingest each version into the running stack and score nDCG@10."),
    ] = False,
    out: Annotated[Path, typer.Option(help="JSON report.")] = Path("results/bench-documents.json"),
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
) -> None:
    """Render a BEIR set to PDFs and scans, parse them, and score word recall, pages a minute
    and (with --retrieval) nDCG@10 against the plain text (issue 46's fidelity table)."""
    from bench.documents import build, fidelity

    if retrieval:
        check_api(api, token)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console) as bar:
        tasks: dict[str, Any] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done)

        made = build(beir, work, scan_docs=scan_docs, limit=limit, progress=progress)
        text = fidelity(beir, work / "text-pdf", progress=progress)
        scans = fidelity(beir, work / "scan-pdf", progress=progress)
    report: dict[str, Any] = {
        "dataset": str(beir),
        "made": made,
        "text_layer": text,
        "scans": scans,
    }
    if retrieval:
        name = beir.name
        ns = {kind: f"{name}-{kind}" for kind in ("text", "text-pdf", "subset", "scan-pdf")}
        report["retrieval"] = {
            "text": {"ndcg@10": _ndcg(work / "beir-text", ns["text"], api, token, True)},
            "text_pdf": {
                "ingest": _ingest(work / "text-pdf", ns["text-pdf"]),
            },
            "subset_text": {"ndcg@10": _ndcg(work / "beir-subset", ns["subset"], api, token, True)},
            "scan_pdf": {"ingest": _ingest(work / "scan-pdf", ns["scan-pdf"])},
        }
        r = report["retrieval"]
        r["text_pdf"]["ndcg@10"] = _ndcg(work / "beir-text-pdf", ns["text-pdf"], api, token, False)
        r["scan_pdf"]["ndcg@10"] = _ndcg(work / "beir-scan-pdf", ns["scan-pdf"], api, token, False)
        r["text_pdf"]["delta"] = round(r["text_pdf"]["ndcg@10"] - r["text"]["ndcg@10"], 4)
        r["scan_pdf"]["delta"] = round(r["scan_pdf"]["ndcg@10"] - r["subset_text"]["ndcg@10"], 4)
        for key, pages in (("text_pdf", made["text_pdf_pages"]), ("scan_pdf", made["scan_pages"])):
            seconds = r[key]["ingest"]["seconds"]
            r[key]["ingest"]["pages_per_minute"] = round(60 * pages / seconds, 1)
    console.print_json(json.dumps(report))
    save_json(report, out)


def bench_during_ingest(
    files: Annotated[
        Path,
        typer.Option(exists=True, file_okay=False, help="A folder of files to ingest meanwhile."),
    ],
    queries: Queries = DEFAULT_QUERIES,
    namespace: Annotated[
        str | None, typer.Option(help="Where the queries search (default: the API's).")
    ] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Load rounds busy, and as many idle.")] = 3,
    concurrency: Concurrency = 8,
    duration: Duration = 25.0,
    delay: Annotated[
        float, typer.Option(min=0, help="Seconds into the ingest before the first round.")
    ] = 20.0,
    out: Annotated[Path, typer.Option(help="JSON report.")] = Path(
        "results/bench-during-ingest.json"
    ),
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
) -> None:
    """Load the running API in rounds while `ragbus ingest FILES` works, then as many rounds
    once it is done; report p95 busy against idle (issue 46's goal: within 1.5x). The folder
    goes into a namespace of its own."""
    import asyncio

    from bench.during_ingest import measure
    from bench.load import load_queries

    check_api(api, token)
    try:
        report = asyncio.run(
            measure(
                api,
                load_queries(queries),
                files,
                namespace=namespace,
                rounds=rounds,
                concurrency=concurrency,
                duration_s=duration,
                delay_s=delay,
                token=token,
                progress=lambda line: console.print(line),
            )
        )
    except RuntimeError as exc:
        raise Failure(str(exc)) from None
    for kind in ("busy", "idle"):
        p95 = ", ".join(f"{r['p95_ms']:.0f}" for r in report[kind])
        qps = ", ".join(f"{r['throughput_qps']:.1f}" for r in report[kind])
        errors = ", ".join(str(r["errors"]) for r in report[kind])
        console.print(f"{kind}: p95 {p95} ms; {qps} q/s; errors {errors}")
    refused = sum(r["rate_limited"] for r in (*report["busy"], *report["idle"]))
    if refused:
        console.print(
            f"[yellow]{refused} requests were refused by the tenant's submission quota (429):"
            "[/yellow] the rounds ran below the load asked for; start the stack with "
            "RAGBUS_QUOTA_REQUESTS_PER_S=0"
        )
    console.print(
        f"p95 {report['busy_p95_ms']:.0f} ms during the ingest against "
        f"{report['idle_p95_ms']:.0f} ms idle: {report['ratio']:.2f}x (worst round "
        f"{report['worst_round_ratio']:.2f}x; goal {report['goal_ratio']}x: "
        f"{'met' if report['met'] else 'missed'})"
    )
    save_json(report, out)
    console.print(f"wrote {out}")
