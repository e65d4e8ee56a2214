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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import nats
from nats.js import JetStreamContext

from bench.load import percentile
from client import ApiError, RagbusClient
from contracts import subjects as sj
from contracts.ingest import DocumentIn
from infra.retrieval.text import chunk_document
from infra.runtime.services import LocalService, free_port, start_nats, start_redis

QUESTIONS = (
    "Who designed the Gatun Locks?",
    "Why did the French attempt to build the canal fail?",
    "How did sanitation change the construction of the canal?",
    "What was the Culebra Cut?",
    "When was the canal handed to Panama?",
    "What water problem does the expansion face?",
)
StoredEvents = Callable[[JetStreamContext, str], Awaitable[list[tuple[int, dict[str, Any]]]]]
"""Every caller event the stream holds for a request, with its sequence: the CLI hands in
`api.event_stream.stored_events` (bench takes nothing from the HTTP layer)."""

ROLES: dict[str, tuple[list[str], int]] = {
    "api": (["api"], 1),
    "orchestrator": (["orchestrator"], 2),
    # Two of every role that can have two: a kill then takes one process of a role, never the
    # role. The embedded stores belong to one process, so that role has one.
    "classify": (["worker", "classify"], 2),
    "stores": (["worker", "search", "fuse", "tool", "ingest"], 1),
    "answer": (["worker", "generate", "critic"], 2),
}
TERMINAL = frozenset({"completed", "failed", "timed_out", "cancelled"})
SETTINGS_ENV = {
    # A killed worker is back within seconds, but loading its models on two busy cores can
    # take a while: deadlines that outlast a restart, so that a kill delays and degrades.
    "RAGBUS_REQUEST_TIMEOUT_S": "90",
    "RAGBUS_CLASSIFY_TIMEOUT_S": "30",
    "RAGBUS_SEARCH_TIMEOUT_S": "30",
    "RAGBUS_FUSE_TIMEOUT_S": "30",
    "RAGBUS_GENERATE_TIMEOUT_S": "45",
    "RAGBUS_CRITIC_TIMEOUT_S": "30",
    "RAGBUS_TOOL_TIMEOUT_S": "30",
    "RAGBUS_ACK_WAIT_S": "6",
    "RAGBUS_RETRY_DELAY_S": "0.5",
    "RAGBUS_SWEEP_INTERVAL_S": "30",
    "RAGBUS_LOG_LEVEL": "WARNING",
    "RAGBUS_START_SERVICES": "false",
    "RAGBUS_UP_PROCESSES": "1",
}
CHAOS_NAMESPACE = "chaos"
READY_TIMEOUT_S = 240.0
VERIFY_CONCURRENCY = 16
"""Requests checked at once: each read waits half a second of quiet after its last event."""
MISSED_LISTED = 20
"""Requests whose client stream missed an event, listed by id in the report at most."""


@dataclass
class Tracked:
    """One request as a client saw it."""

    request_id: str
    submitted_at: float
    seqs: set[int] = field(default_factory=set)
    status: str = "unfinished"
    latency_ms: float | None = None
    resumes: int = 0


@dataclass
class Role:
    name: str
    args: list[str]
    processes: list[subprocess.Popen[bytes] | None]


class Cluster:
    """The services and the role processes, each killable and restartable."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.nats_port, self.redis_port, self.api_port = free_port(), free_port(), free_port()
        self.nats: LocalService | None = None
        self.redis: LocalService | None = None
        self.roles = {name: Role(name, args, [None] * n) for name, (args, n) in ROLES.items()}
        self.env = {
            **os.environ,
            **SETTINGS_ENV,
            "RAGBUS_NATS_URL": f"nats://127.0.0.1:{self.nats_port}",
            "RAGBUS_REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "RAGBUS_DATA_DIR": str(root / "data"),
            "RAGBUS_API_PORT": str(self.api_port),
            "RAGBUS_API_TOKEN": "",
        }
        self.url = f"http://127.0.0.1:{self.api_port}"
        self.kills: Counter[str] = Counter()
        self._logs = (root / "roles.log").open("ab")

    def start_services(self) -> None:
        self.nats = start_nats(self.nats_port, self.root / "nats")
        self.redis = start_redis(self.redis_port, self.root / "redis", persistent=True)

    def restart_service(self, which: str) -> None:
        """SIGKILL nats-server or redis-server and start it again on its port and storage."""
        service = self.nats if which == "nats" else self.redis
        assert service is not None
        os.kill(service.process.pid, signal.SIGKILL)
        service.process.wait(10)
        time.sleep(1.0)
        if which == "nats":
            self.nats = start_nats(self.nats_port, self.root / "nats")
        else:
            self.redis = start_redis(self.redis_port, self.root / "redis", persistent=True)

    def spawn(self, role: Role, index: int) -> None:
        role.processes[index] = subprocess.Popen(
            [sys.executable, "-m", "cli", *role.args],
            env=self.env,
            stdout=self._logs,
            stderr=self._logs,
        )

    def start_roles(self) -> None:
        for role in self.roles.values():
            for index in range(len(role.processes)):
                self.spawn(role, index)

    def kill(self, name: str) -> int | None:
        """SIGKILL one live process of the role; its index, to restart, or None."""
        role = self.roles[name]
        live = [i for i, p in enumerate(role.processes) if p is not None and p.poll() is None]
        if len(live) < len(role.processes) or not live:
            return None  # a process of this role is already down
        index = random.choice(live)
        process = role.processes[index]
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        self.kills[name] += 1
        return index

    def revive_all(self) -> None:
        for role in self.roles.values():
            for index, process in enumerate(role.processes):
                if process is None or process.poll() is not None:
                    self.spawn(role, index)

    def stop(self) -> None:
        for role in self.roles.values():
            for process in role.processes:
                if process is not None and process.poll() is None:
                    process.terminate()
        for role in self.roles.values():
            for process in role.processes:
                if process is not None:
                    try:
                        process.wait(20)
                    except subprocess.TimeoutExpired:
                        process.kill()
        for service in (self.nats, self.redis):
            if service is not None:
                service.stop()
        self._logs.close()


async def _ready(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=3) as http:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"{url}/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.5)
    raise RuntimeError(f"the cluster was not ready within {timeout_s:g} s")


def chaos_documents(count: int) -> list[DocumentIn]:
    """Documents long enough that an ingest job of them is still running when it is killed."""
    base = [
        p.read_text(encoding="utf-8")
        for p in sorted((Path(__file__).parent / "sample").glob("*.md"))
    ]
    return [
        DocumentIn(
            id=f"chaos-{n:03d}",
            title=f"Chaos document {n}",
            text=f"# Chaos document {n}\n\n{base[n % len(base)]}\n\nCopy {n} of the sample.",
            namespace=CHAOS_NAMESPACE,
        )
        for n in range(count)
    ]


class Clients:
    """Closed-loop askers that outlast the failures around them."""

    def __init__(self, url: str, stop: asyncio.Event, request_timeout_s: float) -> None:
        self.url = url
        self.stop = stop
        self.timeout_s = request_timeout_s
        self.tracked: list[Tracked] = []
        self.submit_retries = 0
        self.gave_up_submitting = 0

    async def _submit(self, client: RagbusClient, question: str) -> str | None:
        key = uuid.uuid4().hex
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                answer = await client.submit(question, idempotency_key=key)
                return str(answer["request_id"])
            except Exception:  # the API or the bus is down: the same key again, later
                self.submit_retries += 1
                await asyncio.sleep(0.5)
        self.gave_up_submitting += 1
        return None

    async def _follow(self, client: RagbusClient, tracked: Tracked) -> None:
        deadline = time.monotonic() + self.timeout_s + 60
        last: int | None = None
        while time.monotonic() < deadline:
            try:
                async for message in client.stream_events(tracked.request_id, last):
                    if message.id is not None and message.id.isdigit():
                        last = int(message.id)
                        tracked.seqs.add(last)
                    if message.event == "done":
                        tracked.status = str(message.data.get("data", {}).get("status"))
                        tracked.latency_ms = (time.monotonic() - tracked.submitted_at) * 1000
                        return
            except Exception:
                pass
            tracked.resumes += 1
            await asyncio.sleep(0.5)

    async def loop(self) -> None:
        async with RagbusClient(self.url, timeout=10) as client:
            while not self.stop.is_set():
                started = time.monotonic()
                request_id = await self._submit(client, random.choice(QUESTIONS))
                if request_id is None:
                    continue
                tracked = Tracked(request_id, started)
                self.tracked.append(tracked)
                await self._follow(client, tracked)


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
                job["job_id"] = await _submit_job(cluster.url, job["documents"])
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


async def _submit_job(url: str, count: int) -> str:
    """Submit the ingest job, again while the API is down (killed a moment ago, restarting):
    one `Idempotency-Key`, so a submission that did land is taken once."""
    documents = [d.model_dump() for d in chaos_documents(count)]
    key = uuid.uuid4().hex
    while True:
        try:
            async with RagbusClient(url, timeout=30) as client:
                return str((await client.ingest(documents, idempotency_key=key))["job_id"])
        except httpx.HTTPError:
            await asyncio.sleep(0.5)
        except ApiError as exc:
            if exc.status < 500:
                raise
            await asyncio.sleep(0.5)


def _describe(seq: int, event: dict[str, Any], done_seq: int | None) -> dict[str, object]:
    data = event.get("data") or {}
    return {
        "seq": seq,
        "type": event.get("type"),
        "phase": data.get("phase"),
        "status": data.get("status"),
        "attempt": event.get("attempt"),
        "after_done": done_seq is not None and seq > done_seq,
    }


async def _verify_requests(
    cluster: Cluster, tracked: Sequence[Tracked], read_events: StoredEvents
) -> dict[str, Any]:
    nc = await nats.connect(cluster.env["RAGBUS_NATS_URL"])
    duplicates = {"answers": 0, "done": 0}
    missing_streams, missing_events, after_done = 0, 0, 0
    statuses: Counter[str] = Counter()
    why_not: Counter[str] = Counter()
    missed: list[dict[str, object]] = []
    try:
        js = nc.jetstream()
        checking = asyncio.Semaphore(VERIFY_CONCURRENCY)

        async def check(client: RagbusClient, request: Tracked) -> None:
            nonlocal missing_streams, missing_events, after_done
            async with checking:
                state = await client.status(request.request_id)
                events = await read_events(js, request.request_id)
            statuses[str(state["status"])] += 1
            if state["status"] != "completed":
                error = state.get("error") or {}
                why_not[f"{state['status']}: {error.get('code')} in {error.get('phase')}"] += 1
            kinds = Counter(str(event.get("type", "")) for _, event in events)
            duplicates["answers"] += kinds["answer"] > 1
            duplicates["done"] += kinds["done"] > 1
            stored = {seq for seq, _ in events}
            lost = stored - request.seqs if request.status != "unfinished" else set()
            # A stream ends at `done`: an event stored after it was published late (by a
            # step that outlived its request), which no reader of the stream is owed.
            done_seq = min((q for q, e in events if e.get("type") == "done"), default=None)
            late = {q for q in lost if done_seq is not None and q > done_seq}
            missing_streams += bool(lost - late)
            missing_events += len(lost - late)
            after_done += len(late)
            if lost and len(missed) < MISSED_LISTED:
                missed.append(
                    {
                        "request_id": request.request_id,
                        "resumes": request.resumes,
                        "lost": [_describe(q, e, done_seq) for q, e in events if q in lost],
                    }
                )

        async with RagbusClient(cluster.url, timeout=30) as client:
            await asyncio.gather(*(check(client, request) for request in tracked))
        dead_letters = (await js.stream_info(sj.STREAM_DLQ)).state.messages
    finally:
        await nc.close()
    return {
        "by_status": dict(statuses),
        "why_not_completed": dict(why_not),
        "streams_missing": missed,
        "terminal": sum(n for s, n in statuses.items() if s in TERMINAL),
        "duplicates": duplicates,
        "streams_missing_events": missing_streams,
        "events_missed": missing_events,
        "events_after_done": after_done,
        "dead_letters": dead_letters,
    }


async def _wait_job(url: str, job_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    job: dict[str, Any] = {}
    async with RagbusClient(url, timeout=10) as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                job = await client.job(job_id)
                if job.get("status") in ("completed", "failed"):
                    return job
            await asyncio.sleep(1.0)
    return job


def _stored_chunks(data_dir: Path, env: dict[str, str]) -> dict[str, set[str]]:
    """Chunk ids per document in the chaos namespace, read from the stores on disk once every
    process has stopped (in a child process, as a worker opens them)."""
    out = data_dir / "stored-chunks.json"
    code = (
        "import json, sys\n"
        "from infra.retrieval.vectors import open_vector_store\n"
        "from infra.settings import Settings\n"
        "store = open_vector_store(Settings(), 384)\n"
        "found = {}\n"
        f"for record in store.iter_points({CHAOS_NAMESPACE!r}):\n"
        "    doc, chunk = record.payload['document_id'], record.payload['chunk_id']\n"
        "    found.setdefault(doc, []).append(chunk)\n"
        "open(sys.argv[1], 'w').write(json.dumps(found))\n"
    )
    subprocess.run([sys.executable, "-c", code, str(out)], env=env, capture_output=True, check=True)
    return {doc: set(ids) for doc, ids in json.loads(out.read_text()).items()}


def _verify_ingest(cluster: Cluster, job: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    documents = chaos_documents(job["documents"])
    expected = {d.id: {c.chunk_id for c in chunk_document(d)} for d in documents}
    stored = _stored_chunks(cluster.root / "data", cluster.env)
    lost = sum(len(ids - stored.get(doc, set())) for doc, ids in expected.items())
    extra = sum(len(ids - expected.get(doc, set())) for doc, ids in stored.items())
    return {
        "documents": len(documents),
        "job_status": record.get("status"),
        "documents_done": record.get("documents_done"),
        # a document indexed before its process was killed, and found already indexed when
        # its message came again, counts as unchanged: indexed once, counted once
        "documents_unchanged": record.get("documents_unchanged"),
        "documents_failed": record.get("documents_failed"),
        "chunks_expected": sum(len(ids) for ids in expected.values()),
        "chunks_counted_by_job": record.get("chunks"),
        "chunks_lost": lost,
        "chunks_extra": extra,
        "documents_lost": sum(1 for doc in expected if not stored.get(doc)),
    }


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
            await _ready(cluster.url, READY_TIMEOUT_S)
            async with RagbusClient(cluster.url, timeout=30) as client:
                seeded = await client.ingest(
                    {"id": p.stem, "title": p.stem, "text": p.read_text(encoding="utf-8")}
                    for p in sorted((Path(__file__).parent / "sample").glob("*.md"))
                )
            await _wait_job(cluster.url, seeded["job_id"], 180)

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
            await _ready(cluster.url, READY_TIMEOUT_S)
            record = await _wait_job(cluster.url, job["job_id"], 300) if "job_id" in job else {}
            requests = await _verify_requests(cluster, clients.tracked, read_events)
        finally:
            cluster.stop()
        ingest = _verify_ingest(cluster, job, record) if "job_id" in job else {}
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
