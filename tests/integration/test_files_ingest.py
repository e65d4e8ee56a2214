"""Files ingested through the bus, on real nats-server and redis-server: a PDF, a Word file, an
HTML page and a Markdown file uploaded as `multipart/form-data`, parsed by the parse worker,
indexed and cited; the original handed back; a corrupt PDF counted failed with its reason
while the rest of its batch is indexed; a parser that hangs or crashes dead-letters its file
while the worker goes on; another tenant refused the file; and `ragbus ingest DIR` on a
folder tree."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
from fpdf import FPDF
from nats.js import api as js_api

from api.app import create_app
from api.auth import Caller, authenticate
from api.event_stream import ingest_events
from contracts import subjects as sj
from contracts.dlq import DeadLetter
from contracts.ingest import FileDocument
from infra.documents import ParserPool
from infra.runtime.files import FileStore
from infra.runtime.ingest_jobs import read_job
from infra.runtime.ingest_producer import publish_job
from infra.runtime.services import LocalService
from infra.runtime.topology import (
    PARSE_WORKER,
    declare_consumer,
    declare_topology,
    parse_lane_consumer,
)
from infra.tenancy.quotas import effective
from launcher.runtime import Runtime
from tests.environment import stack_environment
from tests.integration.conftest import own_services, running, serving, stack_settings
from tests.integration.polling import until
from tests.integration.sse import read_events

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
OBSERVATORY = (
    "The Valdoria glacier observatory was founded in 1887 by the astronomer Ilse Marwick, "
    "who measured how fast the Valdoria glacier retreats each summer."
)
QUESTION = "Who founded the Valdoria glacier observatory?"


def pdf_bytes(*pages: str, title: str = "") -> bytes:
    pdf = FPDF()
    pdf.add_font("DejaVu", fname=FONT)
    pdf.set_font("DejaVu", size=12)
    if title:
        pdf.set_title(title)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    return bytes(pdf.output())


def docx_bytes(heading: str, *paragraphs: str) -> bytes:
    import docx

    document = docx.Document()
    document.add_heading(heading, level=1)
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


HTML = b"""<!doctype html><html><head><title>Harbour lighthouse</title></head><body>
<nav><a href="/">Home</a></nav>
<article><h1>Harbour lighthouse</h1>
<p>The harbour lighthouse of Port Ellary was lit for the first time in 1902; its lamp burned
whale oil until 1921 and paraffin after that, and its keepers logged every passing ship.</p>
<p>In 1934 the tower was raised by four metres so that its light reached the outer reef.</p>
</article><script>var tracking = 1;</script></body></html>"""


def namespace() -> str:
    return "files-" + uuid.uuid4().hex[:8]


async def finished(http: httpx.AsyncClient, job_id: str, timeout: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = (await http.get(f"/v1/ingest/{job_id}")).json()
        if job["status"] in ("completed", "failed"):
            return job
        await asyncio.sleep(0.3)
    raise AssertionError(f"job {job_id} did not finish: {job}")


async def job_events(http: httpx.AsyncClient, job_id: str) -> list[dict[str, Any]]:
    events = await read_events(http, f"/v1/ingest/{job_id}/events")
    return [e.data["data"] for e in events if e.event == "progress"]


async def upload(
    http: httpx.AsyncClient, space: str, *files: tuple[str, bytes], **headers: str
) -> httpx.Response:
    parts = [("files", (name, data, "application/octet-stream")) for name, data in files]
    return await http.post("/v1/documents", files=parts, data={"namespace": space}, headers=headers)


async def test_files_are_parsed_indexed_cited_and_kept(
    http: httpx.AsyncClient, stack: Runtime
) -> None:
    space = namespace()
    report = pdf_bytes(
        "Annual report of the mountain institute. The budget grew by four percent.",
        OBSERVATORY,
        title="Mountain Institute Annual Report",
    )
    minutes = docx_bytes("Council minutes", "The council approved the new bridge over the Sava.")
    notes = b"# Bread notes\n\nKnead the dough for ten minutes, then let it rise twice."
    response = await upload(
        http,
        space,
        ("report.pdf", report),
        ("minutes.docx", minutes),
        ("lighthouse.html", HTML),
        ("bread notes.md", notes),
    )
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["accepted"] == 4
    job = await finished(http, accepted["job_id"])
    assert job["status"] == "completed", job
    assert (job["documents_done"], job["documents_failed"], job["expected"]) == (4, 0, 4), job

    progress = await job_events(http, accepted["job_id"])
    parsed = {e["document_id"]: e["pages"] for e in progress if e.get("stage") == "parsed"}
    assert parsed == {
        "report.pdf": 2,
        "minutes.docx": 0,
        "lighthouse.html": 0,
        "bread_notes.md": 0,
    }, progress
    assert progress[-1]["status"] == "completed"

    asked = await http.post("/v1/queries", json={"query": QUESTION, "namespaces": [space]})
    assert asked.status_code == 202, asked.text
    events = await read_events(http, asked.json()["events_url"])
    [answer] = [e.data["data"] for e in events if e.event == "answer"]
    cited = {c["document_id"] for c in answer["citations"].values()}
    assert "report.pdf" in cited, answer
    assert any("Marwick" in c["snippet"] for c in answer["citations"].values()), answer

    original = await http.get("/v1/documents/report.pdf", params={"namespace": space})
    assert original.status_code == 200, original.text
    assert original.content == report
    assert original.headers["content-type"] == "application/pdf"
    assert original.headers["content-disposition"].startswith('attachment; filename="report.pdf"')
    as_text = await http.get("/v1/documents/report.pdf", params={"namespace": "default"})
    assert as_text.status_code == 404 and "no original file" in as_text.json()["error"]["message"]

    deleted = await http.delete("/v1/documents/minutes.docx", params={"namespace": space})
    assert deleted.status_code == 202
    gone = await http.get("/v1/documents/minutes.docx", params={"namespace": space})
    assert gone.status_code == 404, "deleting a document deletes its original"


async def test_a_corrupt_pdf_is_counted_failed_and_the_rest_indexed(
    http: httpx.AsyncClient, stack: Runtime
) -> None:
    space = namespace()
    broken = b"%PDF-1.7\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF garbage " + os.urandom(512)
    good = b"# Granary\n\nThe granary held barley and wheat through the winter of 1740."
    response = await upload(http, space, ("broken.pdf", broken), ("granary.md", good))
    assert response.status_code == 202, response.text
    job = await finished(http, response.json()["job_id"])
    assert job["status"] == "completed", job
    assert (job["documents_done"], job["documents_failed"]) == (1, 1), job
    assert set(job["errors"]) == {"broken.pdf"} and "broken.pdf" in job["errors"]["broken.pdf"]
    progress = await job_events(http, response.json()["job_id"])
    [refused] = [e for e in progress if e.get("error")]
    assert (
        refused["document_id"] == "broken.pdf" and refused["error"] == job["errors"]["broken.pdf"]
    )
    assert [e["document_id"] for e in progress if e.get("stage") == "parsed"] == ["granary.md"]


async def test_another_tenant_cannot_have_the_file(stack: Runtime) -> None:
    """Tenant isolation is structural: a caller's files are kept under its store namespace, so
    another tenant asking for the same id and namespace asks for another object."""
    assert stack.broker is not None
    apps = {}
    for tenant in ("acme", "beta"):
        app = create_app(stack.settings, broker=stack.broker)
        caller = Caller(tenant, effective(stack.settings))
        app.dependency_overrides[authenticate] = lambda caller=caller: caller
        apps[tenant] = app
    secret = b"# Zephyr\n\nThe Zephyr codename is BLUEFINCH."
    async with (
        serving(apps["acme"]) as acme_url,
        serving(apps["beta"]) as beta_url,
        httpx.AsyncClient(base_url=acme_url, timeout=60) as acme,
        httpx.AsyncClient(base_url=beta_url, timeout=60) as beta,
    ):
        stored = await upload(acme, "docs", ("zephyr.md", secret))
        assert stored.status_code == 202, stored.text
        mine = await acme.get("/v1/documents/zephyr.md", params={"namespace": "docs"})
        assert mine.status_code == 200 and mine.content == secret
        theirs = await beta.get("/v1/documents/zephyr.md", params={"namespace": "docs"})
        assert theirs.status_code == 404 and "BLUEFINCH" not in theirs.text
        job = await beta.get(stored.json()["status_url"])
        assert job.status_code == 404, "nor its job"
        await finished(acme, stored.json()["job_id"])


# -- a parser that hangs or crashes ---------------------------------------------------------

HANG_S = 120.0


async def _misbehaving_parse(self: ParserPool, data: bytes, filename: str) -> Any:
    """The pool's parse, but `hang.pdf` sleeps in the parser process past any limit, and
    `crash.pdf` aborts it, as a parser stuck in a C library or crashing in one does."""
    if filename == "hang.pdf":
        return await self.run(time.sleep, HANG_S, what=filename)
    if filename == "crash.pdf":
        return await self.run(os.abort, what=filename)
    return await ORIGINAL_PARSE(self, data, filename)


ORIGINAL_PARSE = ParserPool.parse


@pytest.fixture
async def parse_only(tmp_path: Path) -> AsyncIterator[Runtime]:
    """A parse worker alone, on services of its own, with a short parse timeout."""
    with own_services(tmp_path, parse_timeout_s=6.0) as settings:
        async with running(settings, orchestrator=False, workers=("parse",)) as runtime:
            yield runtime


async def _publish_files(runtime: Runtime, *files: tuple[str, bytes]) -> str:
    assert runtime.broker is not None and runtime.resources is not None
    store = FileStore(runtime.broker.connection.jetstream(), runtime.settings)
    documents = []
    for name, data in files:
        ref = await store.put("default", name, data, name, "application/pdf")
        documents.append(FileDocument(id=name, file=ref))
    receipt = await publish_job(runtime.resources.bus, documents)
    return receipt.job_id


async def _wait(runtime: Runtime, job_id: str, check: Any, timeout: float = 60) -> dict[str, Any]:
    assert runtime.resources is not None
    deadline = time.monotonic() + timeout
    job: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        job = await read_job(runtime.resources.redis(), job_id)
        if job is not None and check(job):
            return job
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {job_id}: {job}")


async def test_a_parser_that_hangs_or_crashes_dead_letters_its_file_and_the_worker_goes_on(
    parse_only: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ParserPool, "parse", _misbehaving_parse)
    started = time.monotonic()
    failing = await _publish_files(
        parse_only, ("hang.pdf", pdf_bytes("never read")), ("crash.pdf", pdf_bytes("nor this"))
    )
    job = await _wait(parse_only, failing, lambda j: j["documents_failed"] == 2)
    assert time.monotonic() - started < HANG_S / 2, "the hung parser was killed at its limit"
    assert "ran past 6 s on hang.pdf" in job["errors"]["hang.pdf"], job
    assert "crashed" in job["errors"]["crash.pdf"], job

    nc = await nats.connect(parse_only.settings.nats_url)
    try:
        js = nc.jetstream()
        letters = []
        subject = sj.dlq_subject(sj.ingest_parse_subject(failing, "default"))
        sub = await js.subscribe(subject, ordered_consumer=True)
        for _ in range(2):
            msg = await sub.next_msg(timeout=10)
            letters.append(DeadLetter.model_validate_json(msg.data))
        await sub.unsubscribe()
        assert sorted(json.loads(letter.payload)["document"]["id"] for letter in letters) == [
            "crash.pdf",
            "hang.pdf",
        ]
        assert {letter.reason for letter in letters} == {"failed"}
        assert all("ParseCrashed" in letter.error for letter in letters)

        # the worker is still there: the next job's file is parsed
        following = await _publish_files(
            parse_only, ("fine.pdf", pdf_bytes("The canal opened in 1914."))
        )
        parsed: list[dict[str, Any]] = []
        async with asyncio.timeout(60):
            async for _, event in ingest_events(js, following):
                data = event.get("data") or {}
                if data.get("stage") == "parsed":
                    parsed.append(data)
                    break
        assert parsed[0]["document_id"] == "fine.pdf" and parsed[0]["pages"] == 1
        # its document, and the job's seal, wait for an ingest worker (the seal may follow the
        # `parsed` event by a moment)
        docs_subject = sj.ingest_docs_subject(following)

        async def waiting() -> int:
            made = await js.stream_info(sj.STREAM_INGEST, subjects_filter=docs_subject)
            return (made.state.subjects or {}).get(docs_subject, 0)

        held = await until(waiting, 10, satisfied=lambda n: n >= 2)
        assert held == 2, "its document, and the job's seal, wait for an ingest worker"
    finally:
        await nc.close()


# -- ragbus ingest DIR ----------------------------------------------------------------------


async def test_ragbus_ingest_a_folder_tree_of_files(stack: Runtime, tmp_path: Path) -> None:
    root = tmp_path / "reports"
    (root / "q3").mkdir(parents=True)
    (root / "q3" / "report.pdf").write_bytes(pdf_bytes("Revenue rose by nine percent in Q3."))
    (root / "q3" / "minutes.docx").write_bytes(
        docx_bytes("Board minutes", "The board approved the harbour expansion.")
    )
    (root / "summary.md").write_text("# Summary\n\nThe quarter went well for the harbour.")
    space = namespace()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli",
        "ingest",
        str(root),
        "--namespace",
        space,
        "--timeout",
        "180",
        cwd=ROOT,
        env=stack_environment(stack.settings),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 240)
    out = stdout.decode()
    assert process.returncode == 0, (out, stderr.decode())
    assert "2 files to parse" in out, out
    assert "documents: 3 done" in out, out
    assert stack.broker is not None
    store = FileStore(stack.broker.connection.jetstream(), stack.settings)
    original = await store.open_original(space, "q3__report.pdf")
    assert original is not None
    data = b"".join([chunk async for chunk in original.chunks])
    assert data == (root / "q3" / "report.pdf").read_bytes()
    assert await store.open_original(space, "summary.md") is None, "text is sent as text"


async def test_an_ingest_stream_of_an_earlier_release_takes_the_files(
    own_nats: LocalService, tmp_path: Path
) -> None:
    """Declared over a `RAG_INGEST` made before files (documents only): the stream takes the
    parse subjects, the parse workers get their consumer, and the files their object store."""
    settings = stack_settings(own_nats.url, "redis://127.0.0.1:1/0", tmp_path)
    nc = await nats.connect(own_nats.url)
    try:
        js = nc.jetstream()
        await js.add_stream(
            js_api.StreamConfig(
                name=sj.STREAM_INGEST,
                subjects=[f"{sj.INGEST_DOCS_PREFIX}.>"],
                retention=js_api.RetentionPolicy.WORK_QUEUE,
                storage=js_api.StorageType.FILE,
            )
        )
        await declare_topology(js, settings)
        # the parse consumer of the release before lanes, on every parse subject
        await js.delete_consumer(sj.STREAM_INGEST, PARSE_WORKER.durable)
        await js.add_consumer(
            sj.STREAM_INGEST,
            js_api.ConsumerConfig(
                durable_name=PARSE_WORKER.durable,
                filter_subject="rag.ingest.parse.>",
                ack_policy=js_api.AckPolicy.EXPLICIT,
            ),
        )
        await declare_topology(js, settings)
        lane = parse_lane_consumer("acme")
        await declare_consumer(js, lane, settings)  # would overlap the old one's subjects
        info = await js.stream_info(sj.STREAM_INGEST)
        assert sorted(info.config.subjects or []) == ["rag.ingest.docs.>", "rag.ingest.parse.>"]
        consumer = await js.consumer_info(sj.STREAM_INGEST, PARSE_WORKER.durable)
        assert consumer.config.filter_subject == "rag.ingest.parse.*", "an earlier release's"
        assert consumer.config.deliver_subject is None, "a pull consumer"
        bucket = await js.object_store(sj.FILES_BUCKET)
        assert (await bucket.status()).storage_type == js_api.StorageType.FILE
    finally:
        await nc.close()
