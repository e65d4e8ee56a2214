"""Files as jobs, without a bus: the producer's job building (files to the parse workers, text
to the ingest workers, one seal counting both), a folder tree as sources, the multipart form of
`POST /v1/documents` checked and refused whole, and the document a parsed file makes."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis.asyncio as aioredis
from fastapi.testclient import TestClient
from fpdf import FPDF
from nats.js.api import PubAck
from pydantic import TypeAdapter

import api.documents
from api.app import create_app
from api.deps import get_bus, get_jetstream, get_nats, get_redis
from api.documents import attachment, get_files
from contracts import subjects as sj
from contracts.ingest import (
    MAX_DOCUMENT_CHARS,
    DocumentIn,
    FileDocument,
    FileRef,
    IngestDocument,
    IngestFile,
    IngestJobSealed,
    PageSpan,
)
from infra.documents import ParsedDocument
from infra.runtime.ingest_producer import (
    KINDS_READ,
    FileTooLarge,
    LocalFile,
    NotDocuments,
    check_file_sizes,
    document_id_for,
    load_documents,
    load_sources,
    publish_job,
)
from infra.runtime.ingest_producer import JobReceipt as Receipt
from infra.runtime.services import LocalService
from infra.settings import Settings
from workers.parse import FileRefused, made_document, parse_limits

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
Message = TypeAdapter(IngestDocument | IngestFile | IngestJobSealed)


def pdf_bytes(*pages: str) -> bytes:
    pdf = FPDF()
    pdf.add_font("DejaVu", fname=FONT)
    pdf.set_font("DejaVu", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    return bytes(pdf.output())


def ref(name: str = "default/report.pdf", filename: str = "report.pdf") -> FileRef:
    return FileRef(bucket=sj.FILES_BUCKET, name=name, sha256="a" * 64, size=10, filename=filename)


class RecordingBus:
    """JetStream's duplicate window, in miniature: a repeated Nats-Msg-Id is acked as one."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.sent: list[tuple[str, str, str | None, Any]] = []

    async def publish_raw(
        self, body: bytes, subject: str, stream: str, event_id: str | None
    ) -> PubAck:
        duplicate = event_id in self.seen
        if event_id:
            self.seen.add(event_id)
        if not duplicate:
            self.sent.append((subject, stream, event_id, Message.validate_json(body)))
        return PubAck(stream=stream, seq=len(self.sent), duplicate=duplicate)

    async def publish(self, message: Any, subject: str, stream: str) -> PubAck:
        return await self.publish_raw(
            message.model_dump_json().encode(), subject, stream, message.event_id
        )


# -- the producer ---------------------------------------------------------------------------


async def test_a_mixed_job_sends_files_to_parse_text_to_index_and_one_seal_for_both() -> None:
    bus = RecordingBus()
    files = [
        FileDocument(id="report.pdf", file=ref()),
        FileDocument(id="deck.pptx", file=ref("default/deck.pptx", "deck.pptx")),
    ]
    text = DocumentIn(id="notes.md", title="Notes", text="The canal opened in 1914.")
    receipt = await publish_job(bus, [files[0], text, files[1], files[0]], job_id="job-mixed")  # type: ignore[arg-type]
    assert (receipt.accepted, receipt.duplicates) == (3, 1)
    sent = [(subject, type(m).__name__, m.document.id) for subject, _, _, m in bus.sent[:-1]]
    assert sent == [
        ("rag.ingest.parse.default.job-mixed", "IngestFile", "report.pdf"),
        ("rag.ingest.docs.job-mixed", "IngestDocument", "notes.md"),
        ("rag.ingest.parse.default.job-mixed", "IngestFile", "deck.pptx"),
    ]
    assert {stream for _, stream, _, _ in bus.sent} == {sj.STREAM_INGEST}
    for _, _, msg_id, message in bus.sent[:-1]:
        assert msg_id == message.event_id == message.document.content_hash()
    subject, _, _, seal = bus.sent[-1]
    assert subject == "rag.ingest.docs.job-mixed", "the ingest workers keep the job's count"
    assert isinstance(seal, IngestJobSealed) and (seal.expected, seal.duplicates) == (3, 1)


def test_a_file_message_carries_its_reference_never_its_bytes() -> None:
    document = FileDocument(id="report.pdf", file=ref(), metadata={"team": "a"})
    message = IngestFile(request_id="j", event_id=document.content_hash(), document=document)
    body = json.loads(message.model_dump_json())
    assert body["document"]["file"]["name"] == "default/report.pdf"
    assert set(body["document"]) == {"id", "title", "metadata", "namespace", "file"}
    changed = document.model_copy(update={"file": ref().model_copy(update={"sha256": "b" * 64})})
    assert changed.content_hash() != document.content_hash(), "another upload, another version"


def test_a_folder_tree_yields_text_documents_and_files_to_parse(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    (root / "q3 2026").mkdir(parents=True)
    (root / "summary.md").write_text("# Summary\nAll well.")
    (root / "q3 2026" / "report.pdf").write_bytes(pdf_bytes("Revenue rose."))
    (root / "q3 2026" / "Deck.PPTX").write_bytes(b"PK\x03\x04 not really")
    (root / "empty.docx").write_bytes(b"")
    (root / "ignored.odt").write_bytes(b"PK\x03\x04")
    sources = list(load_sources(root))
    assert [(type(s).__name__, s.id) for s in sources] == [
        ("LocalFile", "q3_2026__Deck.PPTX"),
        ("LocalFile", "q3_2026__report.pdf"),
        ("DocumentIn", "summary.md"),
    ]
    pdf = sources[1]
    assert isinstance(pdf, LocalFile) and pdf.media_type == "application/pdf"
    assert [d.id for d in load_documents(root)] == ["summary.md"], "text only, as before"
    single = list(load_sources(root / "q3 2026" / "report.pdf"))
    assert [(type(s).__name__, s.id) for s in single] == [("LocalFile", "report.pdf")]
    with pytest.raises(NotDocuments, match=r"cannot ingest .*ignored\.odt: ragbus reads .*\.pdf"):
        list(load_sources(root / "ignored.odt"))
    assert ".docx" in KINDS_READ and ".jsonl" in KINDS_READ


def test_a_file_over_the_limit_refuses_the_job_before_anything_is_sent(tmp_path: Path) -> None:
    big = tmp_path / "big.pdf"
    big.write_bytes(b"%PDF-1.4" + b"x" * 2000)
    small = LocalFile(path=tmp_path / "small.pdf", id="small.pdf")
    small.path.write_bytes(b"%PDF-1.4")
    check_file_sizes([small], 1000)
    with pytest.raises(FileTooLarge, match=r"big\.pdf is 2,008 bytes; files of at most 1,000"):
        check_file_sizes([small, LocalFile(path=big, id="big.pdf")], 1000)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("report.pdf", "report.pdf"),
        ("q3/Annual report 2026.pdf", "q3__Annual_report_2026.pdf"),
        ("a\u00a0b\ufeff.docx", "a_b_.docx"),
        ("   ", None),
        ("x" * 300 + ".pdf", None),
    ],
)
def test_a_file_name_as_a_document_id(name: str, expected: str | None) -> None:
    assert document_id_for(name) == expected


# -- the document a parsed file makes -------------------------------------------------------


def _file_message(**document: Any) -> IngestFile:
    fields: dict[str, Any] = {"id": "report.pdf", "file": ref(), **document}
    return IngestFile(request_id="job-1", document=FileDocument(**fields))


def test_a_parsed_file_makes_a_document_with_its_pages_its_file_and_its_source() -> None:
    parsed = ParsedDocument(
        title="Annual Report",
        text="Page one.\nPage two.",
        pages=[PageSpan(number=1, start=0), PageSpan(number=2, start=10)],
        media_type="application/pdf",
    )
    message = _file_message(metadata={"team": "finance"}, namespace="acme__reports")
    document = made_document(message, parsed)
    assert document.title == "Annual Report", "the file's own title when none was given"
    assert document.pages == parsed.pages and document.file == message.document.file
    assert document.namespace == "acme__reports"
    assert document.metadata == {
        "team": "finance",
        "source": "report.pdf",
        "media_type": "application/pdf",
    }
    titled = made_document(_file_message(title="Given"), parsed)
    assert titled.title == "Given"


@pytest.mark.parametrize(
    ("text", "reason"),
    [("   \n", "no text was found in report.pdf"), ("x" * (MAX_DOCUMENT_CHARS + 1), "split")],
)
def test_a_parsed_file_with_no_text_or_too_much_is_refused(text: str, reason: str) -> None:
    parsed = ParsedDocument(title="", text=text, pages=[], media_type="application/pdf")
    with pytest.raises(FileRefused, match=reason):
        made_document(_file_message(), parsed)


def test_the_parse_limits_are_the_settings() -> None:
    limits = parse_limits(
        Settings(parse_timeout_s=7, parse_memory_mb=512, max_pages=9, ocr_dpi=150)
    )
    assert (limits.timeout_s, limits.memory_bytes, limits.max_pages, limits.ocr_dpi) == (
        7,
        512 * 1024 * 1024,
        9,
        150,
    )


# -- the multipart form of POST /v1/documents ----------------------------------------------


class FakeFiles:
    """The object store, in memory."""

    def __init__(self) -> None:
        self.stored: dict[str, tuple[bytes, str, str]] = {}

    async def put(
        self,
        namespace: str,
        document_id: str,
        data: Any,
        filename: str,
        media_type: str = "",
        sha256: str | None = None,
    ) -> FileRef:
        import hashlib

        if not isinstance(data, bytes):  # a spooled upload, read from its start
            data.seek(0)
            data = data.read()
        name = f"{namespace}/{document_id}"
        self.stored[name] = (data, filename, media_type)
        digest = hashlib.sha256(data).hexdigest()
        assert sha256 in (None, digest)
        return FileRef(
            bucket=sj.FILES_BUCKET,
            name=name,
            sha256=digest,
            size=len(data),
            filename=filename,
            media_type=media_type,
        )

    async def open_original(self, namespace: str, document_id: str) -> Any:
        stored = self.stored.get(f"{namespace}/{document_id}")
        if stored is None:
            return None

        async def chunks() -> Any:
            yield stored[0]

        return SimpleNamespace(
            filename=stored[1],
            media_type=stored[2],
            sha256="0" * 64,
            size=len(stored[0]),
            chunks=chunks(),
        )

    async def delete(self, namespace: str, document_id: str) -> bool:
        return self.stored.pop(f"{namespace}/{document_id}", None) is not None


@pytest.fixture
def files() -> FakeFiles:
    return FakeFiles()


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    queued: list[list[Any]] = []

    async def publish_job(bus: Any, documents: list[Any], job_id: str = "", **_: Any) -> Receipt:
        queued.append(list(documents))
        return Receipt(job_id=job_id, accepted=len(documents), duplicates=0)

    monkeypatch.setattr(api.documents, "publish_job", publish_job)
    return queued


@pytest.fixture
def client(redis_service: LocalService, files: FakeFiles) -> TestClient:
    app = create_app(Settings(max_file_bytes=50_000))
    app.dependency_overrides[get_bus] = object
    app.dependency_overrides[get_redis] = lambda: aioredis.from_url(
        redis_service.url, decode_responses=True
    )
    app.dependency_overrides[get_jetstream] = object
    app.dependency_overrides[get_nats] = lambda: SimpleNamespace(max_payload=1024 * 1024)
    app.dependency_overrides[get_files] = lambda: files
    return TestClient(app)


def _docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Minutes", level=1)
    document.add_paragraph("The council met.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return response.json()["error"]


def test_files_become_one_job_each_stored_under_the_namespace(
    client: TestClient, files: FakeFiles, jobs: list[list[Any]]
) -> None:
    response = client.post(
        "/v1/documents",
        files=[
            ("files", ("Annual report.pdf", pdf_bytes("Revenue rose."), "application/pdf")),
            ("files", ("minutes.docx", _docx(), "application/octet-stream")),
            ("files", ("notes.md", b"# Notes\nPlain.", "text/markdown")),
        ],
        data={"namespace": "reports", "metadata": '{"team": "finance"}'},
    )
    assert response.status_code == 202, response.text
    assert response.json()["accepted"] == 3
    [job] = jobs
    assert [(d.id, d.namespace, d.title, d.metadata) for d in job] == [
        ("Annual_report.pdf", "reports", "", {"team": "finance"}),
        ("minutes.docx", "reports", "", {"team": "finance"}),
        ("notes.md", "reports", "", {"team": "finance"}),
    ]
    assert all(isinstance(d, FileDocument) for d in job)
    stored = files.stored["reports/minutes.docx"]
    assert stored[0][:2] == b"PK"
    assert stored[1:] == (
        "minutes.docx",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ), "the kind the bytes say, not the part's"
    original = client.get("/v1/documents/Annual_report.pdf", params={"namespace": "reports"})
    assert original.status_code == 200
    assert original.content.startswith(b"%PDF") and original.headers["content-type"] == (
        "application/pdf"
    )
    assert original.headers["content-disposition"] == (
        "attachment; filename=\"Annual report.pdf\"; filename*=UTF-8''Annual%20report.pdf"
    )
    missing = _error(client.get("/v1/documents/notes.md"), 404)  # another namespace
    assert "no original file" in missing["message"]


@pytest.mark.parametrize(
    ("parts", "fields", "status", "named"),
    [
        ([("big.pdf", b"%PDF-1.4\n" + b"x" * 60_000)], {}, 413, "big.pdf is over 50,000 bytes"),
        ([("notes.odt", b"PK\x03\x04\x14\x00\x00")], {}, 415, "notes.odt"),
        ([("fake.pdf", b"<html><body>Not found</body></html>")], {}, 415, "fake.pdf"),
        ([("empty.pdf", b"")], {}, 422, "empty.pdf is empty"),
        ([("a b.md", b"one"), ("a_b.md", b"two")], {}, 422, "both be document 'a_b.md'"),
        ([("a.md", b"one")], {"namespace": "Not Valid"}, 422, "invalid namespace"),
        ([("a.md", b"one")], {"metadata": "{not json"}, 422, "not JSON"),
        ([("a.md", b"one")], {"metadata": "[1, 2]"}, 422, "a JSON object"),
        ([("a.md", b"one")], {"metadata": json.dumps({"x": "y" * 20_000})}, 422, "16,000"),
        ([("a.md", b"one")], {"title": "no such field"}, 422, "not a field of this form"),
        ([], {"namespace": "docs"}, 422, "no file"),
    ],
)
def test_a_bad_batch_of_files_is_refused_whole_naming_the_file(
    client: TestClient,
    files: FakeFiles,
    jobs: list[list[Any]],
    parts: list[tuple[str, bytes]],
    fields: dict[str, str],
    status: int,
    named: str,
) -> None:
    good = [("files", ("good.md", b"# Good\nFine.", "text/markdown"))]
    sent: list[Any] = [
        *good,
        *(("files", (name, data, "application/octet-stream")) for name, data in parts),
    ]
    if not parts:  # a form of fields alone, still multipart
        sent = []
    sent += [(name, (None, value)) for name, value in fields.items()]
    response = client.post("/v1/documents", files=sent)
    error = _error(response, status)
    assert named in error["message"], error
    assert jobs == [] and files.stored == {}, "nothing of the batch was stored or queued"


def test_a_file_sent_twice_is_one_document(client: TestClient, jobs: list[list[Any]]) -> None:
    twice = [("files", ("same.md", b"# Same\nText.", "text/markdown"))] * 2
    response = client.post("/v1/documents", files=twice)
    assert response.status_code == 202, response.text
    assert [d.id for d in jobs[0]] == ["same.md"] and response.json()["accepted"] == 1


def test_a_body_of_neither_kind_is_refused(client: TestClient, jobs: list[list[Any]]) -> None:
    assert _error(client.post("/v1/documents"), 422)["field"] == "body"
    refused = client.post(
        "/v1/documents",
        content=b"--xyz\r\nnot a part",
        headers={"content-type": "multipart/form-data; boundary=xyz"},
    )
    assert refused.status_code in (400, 422), refused.text
    assert jobs == []


def test_json_documents_still_become_a_job(client: TestClient, jobs: list[list[Any]]) -> None:
    body = {"documents": [{"id": "a", "title": "A", "text": "Alpha."}]}
    assert client.post("/v1/documents", json=body).status_code == 202
    assert [type(d).__name__ for d in jobs[0]] == ["DocumentIn"]
    field = _error(client.post("/v1/documents", json={"documents": []}), 422)["field"]
    assert field == "documents"
    spoofed = {**body["documents"][0], "file": ref("acme__docs/secret.pdf").model_dump()}
    refused = _error(client.post("/v1/documents", json={"documents": [spoofed]}), 422)
    assert refused["field"] == "documents.0.file", "a stored original is not the caller's to name"


def test_the_same_idempotency_key_with_the_same_files_starts_one_job(
    client: TestClient, jobs: list[list[Any]]
) -> None:
    key = {"Idempotency-Key": "files-once-" + str(id(jobs))}
    upload = [("files", ("once.md", b"# Once\nOnly once.", "text/markdown"))]
    first = client.post("/v1/documents", files=upload, headers=key)
    again = client.post("/v1/documents", files=upload, headers=key)
    assert first.status_code == again.status_code == 202
    assert first.json()["job_id"] == again.json()["job_id"] and len(jobs) == 1
    other = [("files", ("once.md", b"# Once\nAnother text.", "text/markdown"))]
    assert _error(client.post("/v1/documents", files=other, headers=key), 422)


def test_the_openapi_document_describes_both_bodies(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    content = paths["/v1/documents"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/json", "multipart/form-data"}
    assert content["multipart/form-data"]["schema"]["properties"]["files"]["type"] == "array"
    assert {"413", "415"} <= set(paths["/v1/documents"]["post"]["responses"])
    assert "get" in paths["/v1/documents/{document_id}"]


def test_a_download_name_is_safe_in_a_header() -> None:
    assert attachment('dir/re"port\r\n.pdf') == (
        "attachment; filename=\"re_port__.pdf\"; filename*=UTF-8''re%22port%0D%0A.pdf"
    )
    assert attachment("über.pdf").startswith('attachment; filename="_ber.pdf"; ')
