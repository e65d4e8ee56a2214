"""`ragbus bench-documents`: how faithfully and how fast ragbus reads a BEIR set kept as files
(PDFs with a text layer, and scans), against the plain text of the same documents. The
measuring is `bench.documents`'; this module parses options, drives a running stack for the
retrieval part, and prints."""

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

from cli.common import DEFAULT_API, ApiUrl, Failure, Token, check_api, console, save_json


def register(app: typer.Typer) -> None:
    app.command("bench-documents")(bench_documents)


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
