"""`ragbus bench-filters`: whether filtered requests keep to their filter, on a running API.

A BEIR corpus (`corpus.jsonl`) is given metadata drawn from each document's id
(`document_metadata`: `bench.filter_cases.random_metadata` seeded by the id, plus `bucket`, the
id's CRC-32 modulo 10, so that `{"bucket": 3}` keeps about a tenth of the documents for
`ragbus bench --filter`) and ingested into a namespace through `POST /v1/documents`
(unchanged documents are skipped by the stores, so a second run costs little). Then N
random filters (`bench.filter_cases.random_filter`), each with a question of the query file,
are asked in `retrieve` mode, C at a time, and every answer is checked against
`contracts.filters.matches` over the metadata the bench gave:
- every passage of the fused list and of each channel's ranking belongs to a document that
  passes (a passage outside the filter is a failure, named in the report);
- the fused list holds `top_k` passages whenever at least `top_k` chunks pass (the chunks
  each document makes are counted as the ingest worker makes them:
  `infra.retrieval.chunking.chunk_document` with the settings' chunk sizes).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.filter_cases import random_filter, random_metadata
from client import RagbusClient
from contracts.filters import canonical, matches, parse_filter

INGEST_BATCH = 100
"""Documents per `POST /v1/documents`."""


def document_metadata(document_id: str) -> dict[str, Any]:
    """The metadata the bench gives a document: the same for the same id, on every run."""
    seed = zlib.crc32(document_id.encode())
    meta = random_metadata(random.Random(seed))
    meta["bucket"] = seed % 10
    return meta


def corpus_documents(path: Path, namespace: str, limit: int | None) -> Iterator[dict[str, Any]]:
    """The corpus's documents as `POST /v1/documents` takes them, with the bench's metadata."""
    with path.open(encoding="utf-8") as lines:
        for n, line in enumerate(lines):
            if limit is not None and n >= limit:
                return
            row = json.loads(line)
            doc_id = str(row["_id"])
            yield {
                "id": doc_id,
                "title": str(row.get("title") or ""),
                "text": str(row.get("text") or ""),
                "namespace": namespace,
                "metadata": document_metadata(doc_id),
            }


async def ingest(client: RagbusClient, documents: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Send the documents in batches and wait for every job; the jobs' counts added up."""
    jobs = []
    for start in range(0, len(documents), INGEST_BATCH):
        accepted = await client.ingest(documents[start : start + INGEST_BATCH])
        jobs.append(accepted["job_id"])
    totals: Counter[str] = Counter()
    for job_id in jobs:
        while True:
            job = await client.job(job_id)
            if job["status"] != "running":
                break
            await asyncio.sleep(1.0)
        for key in ("documents_done", "documents_unchanged", "documents_failed", "chunks"):
            totals[key] += int(job.get(key) or 0)
    return dict(totals)


async def _retrieve(
    client: RagbusClient, query: str, namespace: str, top_k: int, raw: dict[str, Any]
) -> dict[str, Any]:
    submitted = await client.submit(
        query, namespaces=[namespace], top_k=top_k, mode="retrieve", filter=raw
    )
    answer: dict[str, Any] = {}
    status = "unknown"
    async for message in client.stream_events(submitted["request_id"]):
        data = message.data.get("data") or {}
        if message.event == "answer":
            answer = data
        elif message.event == "done":
            status = str(data.get("status"))
    return {"status": status, "retrieval": (answer.get("metadata") or {}).get("retrieval") or {}}


async def run_filters(
    api: str,
    queries: Sequence[str],
    chunk_counts: dict[str, int],
    metadata: dict[str, dict[str, Any]],
    *,
    namespace: str,
    filters: int,
    top_k: int,
    concurrency: int,
    seed: int,
    token: str | None = None,
) -> dict[str, Any]:
    """Ask `filters` random filters and check every answer (see the module's docstring)."""
    rng = random.Random(seed)
    cases = [(random_filter(rng), rng.choice(queries)) for _ in range(filters)]
    outside: list[dict[str, Any]] = []
    short: list[dict[str, Any]] = []
    statuses: Counter[str] = Counter()
    kept_shares: list[float] = []
    passages = channel_passages = 0
    latencies: list[float] = []
    started = time.perf_counter()
    queue: asyncio.Queue[tuple[int, dict[str, Any], str]] = asyncio.Queue()
    for n, (raw, query) in enumerate(cases):
        queue.put_nowait((n, raw, query))

    async with RagbusClient(api, token=token, timeout=120) as client:

        async def loop() -> None:
            nonlocal passages, channel_passages
            while not queue.empty():
                n, raw, query = queue.get_nowait()
                where = parse_filter(raw)
                passing = {doc for doc, meta in metadata.items() if matches(where, meta)}
                matching_chunks = sum(chunk_counts.get(doc, 0) for doc in passing)
                kept_shares.append(len(passing) / max(len(metadata), 1))
                asked = time.perf_counter()
                got = await _retrieve(client, query, namespace, top_k, raw)
                latencies.append((time.perf_counter() - asked) * 1000)
                statuses[got["status"]] += 1
                retrieval = got["retrieval"]
                fused = [item["document_id"] for item in retrieval.get("fused") or []]
                passages += len(fused)
                strays = [doc for doc in fused if doc not in passing]
                for channel, ranking in (retrieval.get("channels") or {}).items():
                    channel_passages += len(ranking)
                    strays += [
                        f"{channel}:{item['document_id']}"
                        for item in ranking
                        if item["document_id"] not in passing
                    ]
                if strays:
                    outside.append({"case": n, "filter": canonical(raw), "outside": strays[:10]})
                if got["status"] == "completed" and len(fused) < min(top_k, matching_chunks):
                    short.append(
                        {
                            "case": n,
                            "filter": canonical(raw),
                            "fused": len(fused),
                            "matching_chunks": matching_chunks,
                        }
                    )

        await asyncio.gather(*(loop() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    shares = sorted(kept_shares)
    return {
        "filters": filters,
        "namespace": namespace,
        "documents": len(metadata),
        "chunks": sum(chunk_counts.values()),
        "top_k": top_k,
        "concurrency": concurrency,
        "seed": seed,
        "statuses": dict(statuses),
        "passages_checked": passages,
        "channel_passages_checked": channel_passages,
        "requests_with_passages_outside": len(outside),
        "outside": outside[:20],
        "requests_short_of_top_k": len(short),
        "short": short[:20],
        "kept_share": {
            "min": round(shares[0], 4) if shares else None,
            "median": round(shares[len(shares) // 2], 4) if shares else None,
            "max": round(shares[-1], 4) if shares else None,
            "none_kept": sum(share == 0 for share in shares),
        },
        "latency_ms": {
            "p50": round(latencies[len(latencies) // 2], 1) if latencies else None,
            "p95": round(latencies[int(len(latencies) * 0.95)], 1) if latencies else None,
        },
        "elapsed_s": round(elapsed, 1),
    }
