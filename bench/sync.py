"""`ragbus bench-sync`: a folder source against `ragbus ingest` on the same files, on a stack of
its own (`bench.stack.served_stack`: a `ragbus up` on fresh services, with the folder under
`RAGBUS_SOURCE_ROOTS`).

1. A folder of N files of mixed kinds is written from a BEIR corpus: Markdown, text, HTML and
   Word, each document one file.
2. `ragbus ingest FOLDER` (the command, in a process of its own) indexes it into one
   namespace; a source over the same folder is declared and its first sync indexes it into
   another. Both are timed from the command (or the `POST`) to the job's completion, on a
   stack warmed up first by a `ragbus ingest` of 40 of the files into a third namespace.
3. 1 % of the files change, and the source is synced: its time against the first sync's.
4. The source is watched; one file at a time is written and the time until a `retrieve`
   request finds its marker is taken (searchable, through the whole query path).
5. 1 % of the files are deleted and synced; what is left of them is counted in each store:
   originals and catalogue and quota entries while the stack runs, chunk points and graph
   chunks in the stores on disk once it has stopped (`infra.sources.audit`).
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

KINDS = ((".md", 0.4), (".txt", 0.2), (".html", 0.3), (".docx", 0.1))
"""Each file's kind, drawn with these weights."""
WATCH_POLL_S = 0.05


@dataclass(frozen=True)
class Row:
    id: str
    title: str
    text: str


def corpus_rows(paths: list[Path], limit: int) -> tuple[list[Row], int]:
    """`limit` rows from the corpora, in order, and how many distinct rows they hold. Where
    the corpora hold fewer, each further round takes them again with their sentences in
    another order (rotated by the round), so that every file is a document of its own."""
    rows: list[Row] = []
    for path in paths:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                row = json.loads(line)
                text = str(row.get("text") or "").strip()
                if text:
                    rows.append(Row(str(row["_id"]), str(row.get("title") or ""), text))
    distinct = len(rows)
    if not rows:
        return [], 0
    out = rows[:limit]
    round_ = 1
    while len(out) < limit:
        for row in rows:
            if len(out) == limit:
                break
            sentences = [s for s in row.text.split(". ") if s]
            turn = round_ % max(len(sentences), 1)
            text = ". ".join(sentences[turn:] + sentences[:turn])
            out.append(Row(f"{row.id}-r{round_}", row.title, text))
        round_ += 1
    return out, min(distinct, limit)


def _html(title: str, text: str) -> str:
    from html import escape

    return (
        f"<html><head><title>{escape(title)}</title></head><body><article>"
        f"<h1>{escape(title)}</h1><p>{escape(text)}</p></article></body></html>"
    )


def write_file(folder: Path, name: str, suffix: str, title: str, text: str) -> Path:
    path = folder / f"{name}{suffix}"
    if suffix == ".md":
        path.write_text(f"# {title}\n\n{text}\n", encoding="utf-8")
    elif suffix == ".txt":
        path.write_text(f"{title}\n\n{text}\n", encoding="utf-8")
    elif suffix == ".html":
        path.write_text(_html(title, text), encoding="utf-8")
    else:
        import docx

        document = docx.Document()
        document.add_heading(title, level=1)
        document.add_paragraph(text)
        document.save(str(path))
    return path


def build_folder(rows: list[Row], folder: Path, seed: int) -> list[Path]:
    """One file a row, in folders of 100, each of a kind drawn by `KINDS`."""
    chooser = random.Random(seed)
    suffixes = [suffix for suffix, _ in KINDS]
    weights = [weight for _, weight in KINDS]
    paths = []
    for n, row in enumerate(rows):
        sub = folder / f"part-{n // 100:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        suffix = chooser.choices(suffixes, weights)[0]
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in row.id)
        paths.append(write_file(sub, name, suffix, row.title, row.text))
    return paths


def rewrite(path: Path, marker: str) -> None:
    """The file with a new sentence carrying `marker`, in its own kind."""
    title = f"Revised {path.stem}"
    text = f"This revision adds the reference {marker} to the document {path.stem}."
    write_file(path.parent, path.stem, path.suffix, title, text)


async def wait_job(client: Any, job_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.perf_counter() + timeout_s
    while True:
        try:
            job: dict[str, Any] = await client.job(job_id)
        except Exception:
            job = {"status": "unknown"}
        if job.get("status") in ("completed", "failed"):
            return job
        if time.perf_counter() > deadline:
            raise TimeoutError(f"job {job_id} did not end in {timeout_s:g} s: {job}")
        await asyncio.sleep(0.2)


async def retrieved(client: Any, query: str, namespace: str) -> dict[str, dict[str, int]]:
    """The fused list for `query` (a `retrieve` request, to its end): each document's channels
    and its rank in each."""
    submitted = await client.submit(query, mode="retrieve", namespaces=[namespace], top_k=5)
    fused: dict[str, dict[str, int]] = {}
    async for message in client.stream_events(submitted["request_id"]):
        data = message.data.get("data") or {}
        if message.event == "answer":
            retrieval = (data.get("metadata") or {}).get("retrieval") or {}
            for item in retrieval.get("fused") or []:
                fused.setdefault(str(item.get("document_id")), dict(item.get("channels") or {}))
    return fused


async def searchable(
    client: Any, marker: str, document_id: str, namespace: str, timeout_s: float
) -> float | None:
    """Seconds until a `retrieve` request for `marker`, a word only the document's new version
    holds, finds the document by that word (its sparse channel ranks it: the vector channel
    could rank the old version for a word it has never seen); None: never."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        found = await retrieved(client, marker, namespace)
        if "sparse" in found.get(document_id, {}):
            return time.perf_counter() - started
        await asyncio.sleep(WATCH_POLL_S)
    return None


STORED_LEFTOVERS = """
import asyncio, json, sys
from infra.settings import Settings
from infra.retrieval.vectors import open_vector_store
from infra.retrieval.graph.embedded import EmbeddedGraphStore

namespace, ids = sys.argv[1], set(json.loads(sys.argv[2]))
settings = Settings()
store = open_vector_store(settings, 384)
points = sum(1 for r in store.iter_points(namespace) if (r.payload or {}).get("document_id") in ids)
graph = EmbeddedGraphStore(settings.data_dir / "graph")
graph.load()
chunks = asyncio.run(graph.chunks_of([(namespace, i) for i in ids]))
print(json.dumps({"vector_points": points, "graph_chunks": len(chunks)}))
"""


def stored_leftovers(env: dict[str, str], namespace: str, ids: list[str]) -> dict[str, int]:
    """Chunk points and graph chunks of `ids` in the stores on disk (the stack stopped)."""
    done = subprocess.run(
        [sys.executable, "-c", STORED_LEFTOVERS, namespace, json.dumps(ids)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def summary(report: dict[str, Any], console: Console) -> None:
    first, ingest = report["first_sync"], report["ingest"]
    console.print(
        f"first sync {first['seconds']:.1f} s against ragbus ingest {ingest['seconds']:.1f} s "
        f"on {report['files']:,} files: {report['first_sync_speed_vs_ingest']:.2f}× its speed "
        "(goal ≥ 0.9)"
    )
    resync = report["resync_1pct"]
    console.print(
        f"re-sync with 1 % changed: {resync['seconds']:.2f} s, "
        f"{resync['fraction_of_first_sync'] * 100:.1f} % of the first sync (goal ≤ 5 %)"
    )
    watch = report["watch"]
    console.print(
        f"under watch: searchable p50 {watch['p50_s']:.2f} s, p95 {watch['p95_s']:.2f} s "
        f"after the write ({watch['writes']} writes, goal p95 ≤ 5 s)"
    )
    console.print(
        f"after deleting {report['deleted']['files']} files: leftovers {report['orphans']}"
    )


def sample_paths(paths: list[Path], fraction: float, seed: int) -> Iterator[Path]:
    chooser = random.Random(seed)
    count = max(1, round(len(paths) * fraction))
    yield from chooser.sample(paths, count)
