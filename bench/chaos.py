"""`ragbus chaos`: an operator's bad day, run on purpose, and what it did to the requests.

Every role runs in its own process on a nats-server and a redis-server (AOF on) started on
free ports with temporary storage: the API, two orchestrators, classify, the store-owning
workers (search, fuse, tool and ingest share the embedded stores, so they share a process),
and generate with critic. Closed-loop clients ask questions (retrying a submission with the
same `Idempotency-Key`, resuming a dropped event stream with `Last-Event-ID`) while the harness:
- SIGKILLs a random process every `kill_every_s` and restarts it shortly after, never taking a
  role's last live process while another of its processes is down;
- kills nats-server and redis-server with SIGKILL once each, and restarts them on their port
  and storage;
- starts an ingest job and kills the process that ingests it while the job runs.

Then it checks what matters, from the broker and the stores rather than from the processes
that were killed: every request reached a terminal status, none has two answers or two `done`
events in JetStream, no client's event stream missed an event that JetStream holds, and the
ingest job indexed every document's chunks exactly (nothing lost, nothing extra).

The cluster (its processes and servers, each killable and restartable) is
`bench.chaos_cluster`, the clients `bench.chaos_clients`, the ingest job `bench.chaos_ingest`,
the checks `bench.chaos_verify`; this module runs them, kills on a schedule, and reports.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.chaos_clients import Clients
from bench.chaos_cluster import READY_TIMEOUT_S, ROLES, Cluster, ready
from bench.chaos_ingest import submit_job, wait_job
from bench.chaos_verify import StoredEvents, verify_ingest, verify_requests
from bench.load import percentile
from client import RagbusClient


async def _chaos(
    cluster: Cluster,
    stop: asyncio.Event,
    duration_s: float,
    kill_every_s: float,
    job: dict[str, Any],
) -> None:
    """Kills on a schedule: one process every `kill_every_s`; the ingest process while its job
    runs; nats-server and redis-server once each."""
    start = time.monotonic()
    events = {"ingest": 0.2, "nats": 0.45, "redis": 0.7}
    pending_restarts: list[asyncio.Task[None]] = []

    async def restart_later(name: str, index: int) -> None:
        await asyncio.sleep(random.uniform(0.5, 3.0))
        cluster.spawn(cluster.roles[name], index)

    while not stop.is_set():
        await asyncio.sleep(kill_every_s * random.uniform(0.6, 1.4))
        elapsed = (time.monotonic() - start) / duration_s
        for event, at in list(events.items()):
            if elapsed < at:
                continue
            del events[event]
            if event == "ingest":
                job["job_id"] = await submit_job(cluster.url, job["documents"])
                await asyncio.sleep(2.0)  # a few documents in: kill the process that ingests
                index = cluster.kill("stores")
                if index is not None:
                    pending_restarts.append(asyncio.create_task(restart_later("stores", index)))
            else:
                await asyncio.to_thread(cluster.restart_service, event)
                job["service_restarts"][event] += 1
        name = random.choice(list(ROLES))
        index = cluster.kill(name)
        if index is not None:
            pending_restarts.append(asyncio.create_task(restart_later(name, index)))
    await asyncio.gather(*pending_restarts, return_exceptions=True)


async def run_chaos(
    *,
    duration_s: float,
    concurrency: int,
    kill_every_s: float,
    ingest_documents: int = 40,
    seed: int | None = None,
    work_dir: Path | None = None,
    read_events: StoredEvents,
) -> dict[str, Any]:
    random.seed(seed)
    with tempfile.TemporaryDirectory(prefix="ragbus-chaos-", dir=work_dir) as tmp:
        cluster = Cluster(Path(tmp))
        try:
            cluster.start_services()
            await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "cli", "train-intent"],
                env=cluster.env,
                check=True,
                capture_output=True,
            )
            cluster.start_roles()
            await ready(cluster.url, READY_TIMEOUT_S)
            async with RagbusClient(cluster.url, timeout=30) as client:
                seeded = await client.ingest(
                    {"id": p.stem, "title": p.stem, "text": p.read_text(encoding="utf-8")}
                    for p in sorted((Path(__file__).parent / "sample").glob("*.md"))
                )
            await wait_job(cluster.url, seeded["job_id"], 180)

            stop = asyncio.Event()
            clients = Clients(cluster.url, stop, request_timeout_s=120)
            job: dict[str, Any] = {
                "documents": ingest_documents,
                "service_restarts": {"nats": 0, "redis": 0},
            }
            started = time.monotonic()
            loops = [asyncio.create_task(clients.loop()) for _ in range(concurrency)]
            chaos = asyncio.create_task(_chaos(cluster, stop, duration_s, kill_every_s, job))
            await asyncio.sleep(duration_s)
            stop.set()
            await chaos
            cluster.revive_all()
            await asyncio.gather(*loops)
            elapsed = time.monotonic() - started
            await ready(cluster.url, READY_TIMEOUT_S)
            record = await wait_job(cluster.url, job["job_id"], 300) if "job_id" in job else {}
            requests = await verify_requests(cluster, clients.tracked, read_events)
        finally:
            cluster.stop()
        ingest = verify_ingest(cluster, job, record) if "job_id" in job else {}
        latencies = [t.latency_ms for t in clients.tracked if t.latency_ms is not None]
        completed = requests["by_status"].get("completed", 0)
        submitted = len(clients.tracked)
        return {
            "duration_s": duration_s,
            "elapsed_s": round(elapsed, 1),
            "concurrency": concurrency,
            "kill_every_s": kill_every_s,
            "seed": seed,
            "roles": {name: len(role.processes) for name, role in cluster.roles.items()},
            "kills": sum(cluster.kills.values()),
            "kills_by_role": dict(cluster.kills),
            "service_restarts": job["service_restarts"],
            "requests": {
                "submitted": submitted,
                "terminal": requests["terminal"],
                "terminal_share": round(requests["terminal"] / submitted, 4) if submitted else None,
                "completed_share": round(completed / submitted, 4) if submitted else None,
                "by_status": requests["by_status"],
                "why_not_completed": requests["why_not_completed"],
                "submit_retries": clients.submit_retries,
                "gave_up_submitting": clients.gave_up_submitting,
                "stream_resumes": sum(t.resumes for t in clients.tracked),
            },
            "duplicates": requests["duplicates"],
            "sse_streams_missing_events": requests["streams_missing_events"],
            "sse_events_missed": requests["events_missed"],
            "sse_events_after_done": requests["events_after_done"],
            "sse_streams_missing": requests["streams_missing"],
            "dead_letters": requests["dead_letters"],
            "ingest": ingest,
            "latency_ms": {
                "p50": percentile(latencies, 50),
                "p95": percentile(latencies, 95),
            },
        }
