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

With `nats_nodes=3` NATS is a three-node JetStream cluster with every stream on three nodes,
and instead of the one nats-server restart the harness SIGKILLs one node at a time every
`nats_kill_every_s` (the leader of a query-path stream, or any node), keeps it down a few
seconds and brings it back; one of those outages takes the ingest stream's leader while the
ingest job runs.

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
import contextlib
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.chaos_clients import Clients
from bench.chaos_cluster import READY_TIMEOUT_S, Cluster, boot, ready
from bench.chaos_ingest import submit_job, wait_job
from bench.chaos_redis import KeptKey, verify_redis_state
from bench.chaos_verify import StoredEvents, verify_ingest, verify_requests
from bench.load import percentile
from contracts import subjects as sj

SUPERVISE_EVERY_S = 1.0
QUERY_PATH_STREAMS = (sj.STREAM_QUERIES, sj.STREAM_CMD, sj.STREAM_RES, sj.STREAM_EVENTS)


async def _node_chaos(cluster: Cluster, stop: asyncio.Event, every_s: float) -> None:
    """One NATS node down at a time, every `every_s` (jittered): a query-path stream's leader
    four times in five, any node otherwise."""
    while not stop.is_set():
        await asyncio.sleep(every_s * random.uniform(0.6, 1.4))
        if stop.is_set():
            return
        stream = random.choice([*QUERY_PATH_STREAMS, None])
        await cluster.nats_node_outage(stream, down_s=random.uniform(3.0, 8.0))


async def _primary_chaos(cluster: Cluster, stop: asyncio.Event, every_s: float) -> None:
    """The Redis primary SIGKILLed every `every_s` (jittered), the sentinels left to promote
    its replica, the killed server brought back as the new primary's replica."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s * random.uniform(0.6, 1.4))
        if not stop.is_set():
            await cluster.redis_primary_outage(down_s=random.uniform(2.0, 6.0))


async def _supervise(cluster: Cluster, stop: asyncio.Event) -> None:
    """Start again, as a supervisor would, a process that exited on its own (one that started
    while a stream had no leader and gave up, say). A task of its own: the kills wait on the
    API at times (an ingest job's submission), and the API may be the process that exited. It
    runs until the checks are over, not only while the kills go on: a process started again as
    the last NATS node came back may exit, and the checks read the API."""
    while not stop.is_set():
        cluster.revive_crashed()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SUPERVISE_EVERY_S)


async def _chaos(
    cluster: Cluster,
    stop: asyncio.Event,
    duration_s: float,
    kill_every_s: float,
    job: dict[str, Any],
) -> None:
    """Kills on a schedule: one process every `kill_every_s`; the ingest process while its job
    runs (and on a NATS cluster, the ingest stream's leader); nats-server (when it is one
    server) and redis-server once each."""
    start = time.monotonic()
    on_cluster = cluster.nats_cluster is not None
    events = (
        {"ingest": 0.2, "redis": 0.7} if on_cluster else {"ingest": 0.2, "nats": 0.45, "redis": 0.7}
    )
    if cluster.sentinels is not None:
        del events["redis"]  # its primary dies on a schedule of its own (`_primary_chaos`)
    pending_restarts: list[asyncio.Task[Any]] = []

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
                if on_cluster:
                    outage = cluster.nats_node_outage(sj.STREAM_INGEST)
                    pending_restarts.append(asyncio.create_task(outage))
                await asyncio.sleep(2.0)  # a few documents in: kill the process that ingests
                index = cluster.kill("stores")
                if index is not None:
                    pending_restarts.append(asyncio.create_task(restart_later("stores", index)))
            else:
                await asyncio.to_thread(cluster.restart_service, event)
                job["service_restarts"][event] += 1
        name = random.choice(list(cluster.roles))
        index = cluster.kill(name)
        if index is not None:
            pending_restarts.append(asyncio.create_task(restart_later(name, index)))
    await asyncio.gather(*pending_restarts, return_exceptions=True)


def _keep_log(cluster: Cluster) -> str:
    """The roles' log, copied out of the run's temporary directory: the one clue to what went
    wrong, once the run is gone."""
    fd, kept = tempfile.mkstemp(prefix="ragbus-chaos-roles-", suffix=".log")
    os.close(fd)  # a name of its own: two runs failing in the same second keep both logs
    shutil.copyfile(cluster.root / "roles.log", kept)
    return kept


async def run_chaos(
    *,
    duration_s: float,
    concurrency: int,
    kill_every_s: float,
    ingest_documents: int = 40,
    seed: int | None = None,
    work_dir: Path | None = None,
    read_events: StoredEvents,
    nats_nodes: int = 1,
    nats_kill_every_s: float = 15.0,
    redis_sentinel: bool = False,
    redis_kill_every_s: float = 60.0,
    quota: tuple[float, int] | None = None,
    kept_key: KeptKey | None = None,
) -> dict[str, Any]:
    """With `redis_sentinel`, Redis is a primary, a replica and three sentinels, the primary
    is killed every `redis_kill_every_s`, the clients ask in conversations, and the checks
    read every idempotency key through `kept_key` (`bench.chaos_redis`). `quota`: the
    tenant's (submissions a second, burst), which the checks then hold the grants to; unset =
    the default quota."""
    random.seed(seed)
    with tempfile.TemporaryDirectory(prefix="ragbus-chaos-", dir=work_dir) as tmp:
        quota_env = (
            {"RAGBUS_QUOTA_REQUESTS_PER_S": repr(quota[0]), "RAGBUS_QUOTA_BURST": str(quota[1])}
            if quota is not None
            else {}
        )
        cluster = Cluster(
            Path(tmp), nats_nodes=nats_nodes, env=quota_env, redis_sentinel=redis_sentinel
        )
        phase = "boot"
        checked = asyncio.Event()  # the supervisor's end: the checks are over
        supervisor: asyncio.Task[None] | None = None
        try:
            await boot(cluster, seed_timeout_s=180)

            stop = asyncio.Event()
            clients = Clients(cluster.url, stop, request_timeout_s=120, sessions=redis_sentinel)
            job: dict[str, Any] = {
                "documents": ingest_documents,
                "service_restarts": {"nats": 0, "redis": 0},
            }
            started = time.monotonic()
            loops = [asyncio.create_task(clients.loop()) for _ in range(concurrency)]
            chaos = asyncio.create_task(_chaos(cluster, stop, duration_s, kill_every_s, job))
            supervisor = asyncio.create_task(_supervise(cluster, checked))
            nodes = (
                asyncio.create_task(_node_chaos(cluster, stop, nats_kill_every_s))
                if cluster.nats_cluster is not None
                else None
            )
            primaries = (
                asyncio.create_task(_primary_chaos(cluster, stop, redis_kill_every_s))
                if cluster.sentinels is not None
                else None
            )
            phase = "running"
            await asyncio.sleep(duration_s)
            stop.set()
            phase = "ending the kills"
            await chaos
            if nodes is not None:
                await nodes
            if primaries is not None:
                await primaries
            cluster.revive_all()
            phase = "waiting for the clients' last requests"
            await asyncio.gather(*loops)
            elapsed = time.monotonic() - started
            phase = "waiting for the API"
            await ready(cluster.url, READY_TIMEOUT_S)
            phase = "waiting for the ingest job"
            record = await wait_job(cluster.url, job["job_id"], 300) if "job_id" in job else {}
            phase = "verifying"
            requests = await verify_requests(cluster, clients.tracked, read_events)
            redis_state = (
                await verify_redis_state(
                    cluster.url, cluster.env["RAGBUS_REDIS_URL"], clients.tracked, kept_key, quota
                )
                if redis_sentinel and kept_key is not None
                else {}
            )
            checked.set()
            await supervisor
        except BaseException:  # a timeout's cancellation included: the log says where it hung
            if supervisor is not None:
                supervisor.cancel()
            cluster.stop()
            print(f"the chaos run failed while {phase}; the roles' log: {_keep_log(cluster)}")
            raise
        cluster.stop()
        kept_log = _keep_log(cluster) if requests["streams_missing_events"] else None
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
            "nats_nodes": nats_nodes,
            "nats_node_kills": dict(cluster.node_kills),
            "nats_node_outages_skipped": cluster.node_outages_skipped,
            # processes that exited on their own and were started again, as a supervisor would
            "crash_restarts": dict(cluster.crash_restarts),
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
            "dead_letter_kinds": requests["dead_letter_kinds"],
            "roles_log_kept": kept_log,
            "ingest": ingest,
            "redis": {
                "sentinel": redis_sentinel,
                "primary_kills": cluster.primary_kills,
                "failover_s": cluster.failover_s,
                **redis_state,
            },
            "latency_ms": {
                "p50": percentile(latencies, 50),
                "p95": percentile(latencies, 95),
            },
            # where to look first: the requests that waited longest, with when they were asked
            "slowest": [
                {
                    "request_id": t.request_id,
                    "latency_ms": round(t.latency_ms or 0.0, 1),
                    "submitted_at_s": round(t.submitted_at - started, 1),
                    "stream_resumes": t.resumes,
                }
                for t in sorted(
                    (t for t in clients.tracked if t.latency_ms is not None),
                    key=lambda t: -(t.latency_ms or 0),
                )[:5]
            ],
        }
