"""Hostile files and greedy callers against a real `ragbus up` in `tenants` mode (issue 54).

Tenant `mallory` sends every hostile input of `hostile_inputs` (files refused at upload, files
failed in their job beside good ones), oversized and endless bodies, nested JSON, a folder
with links out of it, 200 parallel downloads of a large original, and a flood of slow scans.
Meanwhile a probe asks `/healthz` and tenant `alice`'s question every 100 ms, and reads the
API process's RSS. The goals: `/healthz` p99 at most 100 ms, the API's RSS within
`RSS_BOUND_MIB` of where it began, each hostile file refused or failed with its reason, every
good file of the same batch indexed, every one of alice's questions answered, and alice's
one-page file parsed while mallory floods, within `FAIR_WAIT_S`.

With RAGBUS_HOSTILE_REPORT=PATH the figures are written there as JSON as well (the table in
docs/operations.md quotes one such run).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.runtime.services import free_port
from tests.integration import hostile_inputs
from tests.integration.hostile_inputs import FAILED_IN_JOB, MIB, REFUSED_AT_UPLOAD
from tests.integration.test_files_ingest import pdf_bytes
from tests.unit.test_documents_support import book, scanned_pdf
from tests.up_process import ROOT, ragbus_cli, ragbus_up, tenants_env

pytestmark = [pytest.mark.integration, pytest.mark.alone]

ADMIN = "admin-key-for-the-hostile-files-suite-0123456789"
HEALTH_P99_MS = 100.0
RSS_BOUND_MIB = 160
FAIR_WAIT_S = 5.0
MAX_FILE_BYTES = 24 * MIB
MAX_REQUEST_BYTES = 32 * MIB
ORIGINAL_BYTES = 20 * MIB
DOWNLOADS = 200
FLOOD_FILES = 6
FLOOD_PAGES = 4
GOOD = {
    "harbour.pdf": pdf_bytes("The harbour lighthouse of Port Ellary was first lit in 1902."),
    "glacier.md": b"# Glacier\n\nThe Valdoria glacier observatory was founded in 1887.\n",
}
ALICE_TEXT = "The Tessel bridge over the river Amber was opened in 1931 by the mayor Ruth Okafor."
ALICE_QUESTION = "Who opened the Tessel bridge?"


@dataclass
class Probe:
    """`tests.integration.hostile_probe` in a process of its own, and what it measured: each
    record has `at` (wall-clock time) and its `kind` (`healthz`, `question` or `rss`)."""

    process: subprocess.Popen[bytes]
    out: Path

    def records(self, kind: str) -> list[dict[str, Any]]:
        lines = self.out.read_text().splitlines() if self.out.exists() else []
        return [r for r in map(json.loads, lines) if r["kind"] == kind]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(120)
            except subprocess.TimeoutExpired:
                self.process.kill()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def health_during(records: list[dict[str, Any]], start: float, end: float) -> dict[str, float]:
    """`/healthz` asked between two moments: how many, p99 and the slowest (ms)."""
    times = [r["ms"] for r in records if start <= r["at"] < end]
    return {
        "asked": len(times),
        "p99_ms": round(percentile(times, 0.99), 1),
        "max_ms": round(max(times, default=0.0), 1),
    }


@dataclass
class Stack:
    url: str
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    root: Path
    mallory: str = ""
    alice: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    phases: list[tuple[str, float, float]] = field(default_factory=list)
    """Each attack (test) of the suite, with when it began and ended (wall-clock)."""

    def headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def tenant(self, name: str) -> str:
        made = httpx.post(
            f"{self.url}/v1/admin/tenants",
            json={"tenant": name},
            headers=self.headers(ADMIN),
            timeout=60,
        )
        assert made.status_code == 201, made.text
        return str(made.json()["api_key"])

    def request(self, key: str, request_id: str, timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            view = httpx.get(f"{self.url}/v1/queries/{request_id}", headers=self.headers(key))
            if view.json()["status"] in ("completed", "failed", "timed_out"):
                return dict(view.json())
            time.sleep(0.2)
        raise AssertionError(f"request {request_id} did not finish")

    def job(self, key: str, job_id: str, timeout: float = 180) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = httpx.get(f"{self.url}/v1/ingest/{job_id}", headers=self.headers(key)).json()
            if job["status"] in ("completed", "failed"):
                return dict(job)
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} did not finish: {job}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("hostile")
    api_port = free_port()
    env = tenants_env(
        root,
        api_port,
        free_port(),
        ADMIN,
        LOG_LEVEL="INFO",
        MAX_FILE_BYTES=str(MAX_FILE_BYTES),
        MAX_REQUEST_BYTES=str(MAX_REQUEST_BYTES),
        MAX_PAGES=str(hostile_inputs.MAX_PAGES),
        PARSE_TIMEOUT_S="30",
        TENANT_MAX_TRANSFERS="4",
    )
    url = f"http://127.0.0.1:{api_port}"
    with ragbus_up(env, root / "up.log", url) as process:
        stack = Stack(url, env, process, root)
        stack.mallory, stack.alice = stack.tenant("mallory"), stack.tenant("alice")
        docs = {"documents": [{"id": "bridge", "title": "Tessel bridge", "text": ALICE_TEXT}]}
        job = httpx.post(f"{url}/v1/documents", json=docs, headers=stack.headers(stack.alice))
        assert job.status_code == 202, job.text
        assert stack.job(stack.alice, job.json()["job_id"])["status"] == "completed"
        yield stack
        report = os.environ.get("RAGBUS_HOSTILE_REPORT")
        if report:
            Path(report).write_text(json.dumps(stack.figures, indent=2) + "\n")


@pytest.fixture(scope="module")
def probe(stack: Stack) -> Iterator[Probe]:
    out = stack.root / "probe.jsonl"
    args = [stack.url, stack.alice, str(stack.process.pid), str(out), ALICE_QUESTION]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.hostile_probe", *args], cwd=ROOT
    )
    probe = Probe(process, out)
    deadline = time.monotonic() + 60
    while len(probe.records("question")) < 5:  # its first answers, before any attack
        assert process.poll() is None and time.monotonic() < deadline, "the probe did not start"
        time.sleep(0.2)
    yield probe
    probe.stop()


@pytest.fixture(autouse=True)
def phase(request: pytest.FixtureRequest, stack: Stack) -> Iterator[None]:
    """When each attack ran, so that the probe's figures can be told apart by attack."""
    started = time.time()
    yield
    stack.phases.append((request.node.name.removeprefix("test_"), started, time.time()))


def upload(stack: Stack, files: list[tuple[str, bytes]], **data: str) -> httpx.Response:
    parts = [("files", (name, content, "application/octet-stream")) for name, content in files]
    return httpx.post(
        f"{stack.url}/v1/documents",
        files=parts,
        data=data,
        headers=stack.headers(stack.mallory),
        timeout=120,
    )


def test_files_refused_at_upload_say_why(stack: Stack, probe: Probe) -> None:
    for hostile in REFUSED_AT_UPLOAD:
        started = time.perf_counter()
        response = upload(stack, [(hostile.name, hostile.make()), *GOOD.items()])
        took = time.perf_counter() - started
        assert response.status_code == hostile.status, (hostile.kind, response.text)
        message = response.json()["error"]["message"]
        assert hostile.reason and hostile.reason in message, (hostile.kind, message)
        assert hostile.name in message
        assert took < 5.0, f"{hostile.kind} held its upload {took:.1f} s"


def test_files_failed_in_their_job_say_why_and_the_good_ones_are_indexed(
    stack: Stack, probe: Probe
) -> None:
    files = [(hostile.name, hostile.make()) for hostile in FAILED_IN_JOB]
    started = time.perf_counter()
    response = upload(stack, [*files, *GOOD.items()], namespace="batch")
    assert response.status_code == 202, response.text
    assert time.perf_counter() - started < 10.0, "the upload was held"
    job = stack.job(stack.mallory, response.json()["job_id"])
    errors = job.get("errors") or {}
    for hostile in FAILED_IN_JOB:
        if hostile.reason is None:
            assert hostile.name not in errors, errors.get(hostile.name)
        else:
            assert hostile.reason in errors.get(hostile.name, ""), (hostile.kind, errors)
    assert not set(GOOD) & set(errors), errors
    harmless = sum(hostile.reason is None for hostile in FAILED_IN_JOB)
    assert job["documents_done"] == len(GOOD) + harmless, job
    listed = httpx.get(
        f"{stack.url}/v1/documents",
        params={"namespace": "batch"},
        headers=stack.headers(stack.mallory),
    ).json()
    ids = {document["id"] for document in listed["documents"]}
    assert set(GOOD) <= ids, listed


def test_bodies_over_their_limits_are_refused_unread(stack: Stack, probe: Probe) -> None:
    import socket

    # a declared length over the request's limit: 413 before the body is sent
    with socket.create_connection(("127.0.0.1", int(stack.url.rsplit(":", 1)[1]))) as raw:
        raw.sendall(
            b"POST /v1/documents HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            + f"Authorization: Bearer {stack.mallory}\r\n".encode()
            + b"Content-Type: multipart/form-data; boundary=b\r\n"
            + f"Content-Length: {4 * MAX_REQUEST_BYTES}\r\n\r\n".encode()
        )
        raw.settimeout(10)
        assert raw.recv(4096).startswith(b"HTTP/1.1 413")
    # files each under the file limit, together over the request's
    over = [(f"part-{i}.txt", b"w" * (12 * MIB)) for i in range(3)]
    response = upload(stack, over)
    assert response.status_code == 413, response.text
    assert "RAGBUS_MAX_REQUEST_BYTES" in response.json()["error"]["message"]

    # a chunked body that never ends
    def endless() -> Iterator[bytes]:
        yield (b'--b\r\nContent-Disposition: form-data; name="files"; filename="e.txt"\r\n\r\n')
        for _ in range(10_000):
            yield b"z" * (64 * 1024)

    response = httpx.post(
        f"{stack.url}/v1/documents",
        content=endless(),
        headers={
            **stack.headers(stack.mallory),
            "Content-Type": "multipart/form-data; boundary=b",
        },
        timeout=60,
    )
    assert response.status_code == 413, response.text


def test_nested_json_is_a_clear_error(stack: Stack, probe: Probe) -> None:
    deep = "[" * 8_000 + "]" * 8_000
    response = upload(stack, list(GOOD.items()), metadata=deep)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "metadata"
    body = b'{"documents": [{"id": "n", "text": "x", "metadata": {"a": '
    body += b"[" * 50_000 + b"]" * 50_000 + b"}}]}"
    response = httpx.post(
        f"{stack.url}/v1/documents",
        content=body,
        headers={**stack.headers(stack.mallory), "Content-Type": "application/json"},
    )
    assert response.status_code in (400, 422), response.text


def test_a_link_out_of_the_folder_is_not_followed(stack: Stack, probe: Probe) -> None:
    outside = stack.root / "outside.txt"
    outside.write_text("The operator's seed phrase is TANGERINE-ORBIT-42.")
    folder = stack.root / "folder"
    folder.mkdir()
    (folder / "inside.md").write_text("# Inside\n\nThe ferry leaves at dawn.\n")
    (folder / "notes.txt").symlink_to(outside)
    creds = Path(stack.env["RAGBUS_DATA_DIR"]) / "nats" / "trust" / "service.creds"
    env = {**stack.env, "RAGBUS_NATS_CREDS": str(creds)}
    done = ragbus_cli(env, "ingest", str(folder), "--namespace", "mallory__links", timeout=180)
    output = done.stdout + done.stderr
    assert done.returncode == 3, output
    assert "notes.txt" in output and "not followed" in output, output
    assert "1 done" in output, output  # inside.md alone
    asked = httpx.post(
        f"{stack.url}/v1/queries",
        json={"query": "What is the operator's seed phrase?", "namespaces": ["links"]},
        headers=stack.headers(stack.mallory),
    )
    assert asked.status_code == 202, asked.text
    view = stack.request(stack.mallory, asked.json()["request_id"])
    assert "TANGERINE" not in json.dumps(view), view


def test_parallel_downloads_stream_within_bounds(stack: Stack, probe: Probe) -> None:
    original = (b"a line of the archive, " * (ORIGINAL_BYTES // 23 + 1))[:ORIGINAL_BYTES]
    response = upload(stack, [("archive.txt", original)], namespace="big")
    assert response.status_code == 202, response.text
    digest = hashlib.sha256(original).hexdigest()
    url = "/v1/documents/archive.txt"

    async def download(http: httpx.AsyncClient) -> tuple[int, str]:
        async with http.stream("GET", url, params={"namespace": "big"}) as answer:
            hashed, body = hashlib.sha256(), b""
            async for chunk in answer.aiter_bytes():
                hashed.update(chunk)
                if answer.status_code != 200:
                    body += chunk
            if answer.status_code not in (200, 429):
                return answer.status_code, body.decode()
            return answer.status_code, hashed.hexdigest()

    async def all_at_once() -> list[tuple[int, str]]:
        limits = httpx.Limits(max_connections=DOWNLOADS)
        async with httpx.AsyncClient(
            base_url=stack.url, headers=stack.headers(stack.mallory), timeout=120, limits=limits
        ) as http:
            return await asyncio.gather(*(download(http) for _ in range(DOWNLOADS)))

    results = asyncio.run(all_at_once())
    served = [d for status, d in results if status == 200]
    refused = sum(status == 429 for status, _ in results)
    assert served and all(d == digest for d in served), "every download served whole"
    assert len(served) + refused == DOWNLOADS, [r for r in results if r[0] not in (200, 429)][:3]
    stack.figures["downloads"] = {"asked": DOWNLOADS, "served": len(served), "refused": refused}


def test_a_flood_holds_another_tenants_file_back_no_longer_than_its_lane_opens(
    stack: Stack, probe: Probe
) -> None:
    pages = book(seed=54, pages=FLOOD_PAGES)
    flood = [(f"scan-{i}.pdf", scanned_pdf(pages, dpi=100)) for i in range(FLOOD_FILES)]
    response = upload(stack, flood, namespace="flood")
    assert response.status_code == 202, response.text
    flood_job = response.json()["job_id"]
    time.sleep(3.0)  # the flood's first scans are in the parsers
    one_page = pdf_bytes("Alice's one-page memo: the bridge reopens on Monday.")
    sent = time.monotonic()
    mine = httpx.post(
        f"{stack.url}/v1/documents",
        files=[("files", ("memo.pdf", one_page, "application/pdf"))],
        data={"namespace": "memos"},
        headers=stack.headers(stack.alice),
    )
    assert mine.status_code == 202, mine.text
    job = stack.job(stack.alice, mine.json()["job_id"], timeout=120)
    waited = time.monotonic() - sent
    assert job["status"] == "completed" and job["documents_done"] == 1, job
    flooding = httpx.get(
        f"{stack.url}/v1/ingest/{flood_job}", headers=stack.headers(stack.mallory)
    ).json()
    stack.figures["fair_parsing"] = {
        "one_page_file_indexed_s": round(waited, 2),
        "flood": {"files": FLOOD_FILES, "scanned_pages_each": FLOOD_PAGES},
        "flood_files_done_meanwhile": flooding["documents_done"],
    }
    assert flooding["status"] == "running", "the flood was still being parsed"
    assert waited < FAIR_WAIT_S, f"alice's one-page file waited {waited:.1f} s"


def test_everyone_else_was_served_throughout(stack: Stack, probe: Probe) -> None:
    probe.stop()
    health = probe.records("healthz")
    questions = probe.records("question")
    rss = [r["mib"] for r in probe.records("rss")]
    times = [r["ms"] for r in health]
    errors = [r["error"] for r in health if r["error"]]
    statuses = [r["status"] for r in questions]
    answered = statuses.count("completed")
    baseline, peak = rss[0], max(rss)
    stack.figures["probe"] = {
        "healthz": {
            "asked": len(times),
            "p50_ms": round(percentile(times, 0.5), 1),
            "p99_ms": round(percentile(times, 0.99), 1),
            "max_ms": round(max(times), 1),
            "errors": len(errors),
        },
        "questions": {
            "asked": len(statuses),
            "completed": answered,
            "p95_s": round(percentile([r["seconds"] for r in questions], 0.95), 3),
        },
        "api_rss_mib": {"start": round(baseline, 1), "peak": round(peak, 1)},
        "healthz_by_attack": {name: health_during(health, a, b) for name, a, b in stack.phases},
    }
    print(json.dumps(stack.figures, indent=2))
    assert not errors, errors[:5]
    assert percentile(times, 0.99) <= HEALTH_P99_MS, stack.figures["probe"]
    assert answered == len(statuses) > 100, sorted(set(statuses))
    assert peak - baseline <= RSS_BOUND_MIB, stack.figures["probe"]
