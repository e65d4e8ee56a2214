"""Batch ingestion producer: documents onto the bus as one job, then the job's seal.

Each document's `event_id` is its content hash, so the broker drops a copy re-sent within
its duplicate window (`PubAck.duplicate`): re-running a producer does not double the work.
The seal tells the workers how many documents were accepted, so completion can be known.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from contracts import subjects as sj
from contracts.envelope import new_request_id
from contracts.ingest import DocumentIn, IngestDeletion, IngestDocument, IngestJobSealed
from infra.logging import get_logger
from infra.runtime.bus import Bus

log = get_logger(__name__)

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt"})
KINDS_READ = ".md, .markdown and .txt files, folders of them, and BEIR corpus .jsonl files"
"""What `load_documents` reads, as a person is told it."""


class NotDocuments(ValueError):
    """A path `load_documents` cannot read documents from: its message says what it reads."""


HEADER_ALLOWANCE = 512
"""Bytes a message's headers and protocol line take beside its body (well over what they do)."""


class DocumentTooLarge(ValueError):
    """A document whose bus message exceeds what the NATS server accepts (`max_payload`)."""

    def __init__(self, document_id: str, size: int, limit: int) -> None:
        self.document_id, self.size, self.limit = document_id, size, limit
        super().__init__(
            f"document {document_id!r} is {size:,} bytes as a bus message; the NATS server "
            f"takes at most {limit:,} per message (its max_payload): split it, or raise the limit"
        )


def _message(job_id: str, document: DocumentIn) -> tuple[IngestDocument, bytes]:
    message = IngestDocument(request_id=job_id, event_id=document.content_hash(), document=document)
    return message, message.model_dump_json().encode()


def check_sizes(documents: Iterable[DocumentIn], max_payload: int, job_id: str = "x") -> None:
    """Raise `DocumentTooLarge` for the first document that the server would refuse: a batch
    is refused whole before any of it is published."""
    for document in documents:
        size = len(_message(job_id, document)[1]) + HEADER_ALLOWANCE
        if size > max_payload:
            raise DocumentTooLarge(document.id, size, max_payload)


@dataclass(frozen=True)
class JobReceipt:
    job_id: str
    accepted: int
    duplicates: int


async def publish_job(
    bus: Bus,
    documents: Iterable[DocumentIn],
    job_id: str | None = None,
    progress: Callable[[int], None] | None = None,
    max_payload: int | None = None,
) -> JobReceipt:
    """Publish every document of a job, then seal it; `progress` gets the running count. With
    `max_payload`, a document the server would refuse raises `DocumentTooLarge` before it is
    sent (callers with the whole batch at hand check it all first: `check_sizes`)."""
    job_id = job_id or new_request_id()
    subject = sj.ingest_docs_subject(job_id)
    accepted = duplicates = 0
    for sent, document in enumerate(documents, start=1):
        message, body = _message(job_id, document)
        if max_payload is not None and len(body) + HEADER_ALLOWANCE > max_payload:
            raise DocumentTooLarge(document.id, len(body) + HEADER_ALLOWANCE, max_payload)
        ack = await bus.publish_raw(body, subject, sj.STREAM_INGEST, message.event_id)
        if ack is not None and ack.duplicate:
            duplicates += 1
        else:
            accepted += 1
        if progress is not None:
            progress(sent)
    seal = IngestJobSealed(request_id=job_id, expected=accepted, duplicates=duplicates)
    await bus.publish(seal, subject, sj.STREAM_INGEST)
    log.info("ingest_job_published", job_id=job_id, accepted=accepted, duplicates=duplicates)
    return JobReceipt(job_id=job_id, accepted=accepted, duplicates=duplicates)


async def publish_deletion(
    bus: Bus, namespace: str, document_id: str, job_id: str | None = None
) -> JobReceipt:
    """A one-operation job that removes a document everywhere: ingest workers own the stores."""
    job_id = job_id or new_request_id()
    subject = sj.ingest_docs_subject(job_id)
    deletion = IngestDeletion(request_id=job_id, namespace=namespace, document_id=document_id)
    await bus.publish(deletion, subject, sj.STREAM_INGEST)
    await bus.publish(IngestJobSealed(request_id=job_id, expected=1), subject, sj.STREAM_INGEST)
    log.info("ingest_deletion_published", job_id=job_id, document_id=document_id)
    return JobReceipt(job_id=job_id, accepted=1, duplicates=0)


def _title_of(text: str, fallback: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip() or fallback
    return fallback


def _from_file(path: Path, root: Path) -> DocumentIn | None:
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        log.warning("ingest_file_empty", path=str(path))
        return None
    relative = path.relative_to(root).as_posix() if root != path else path.name
    doc_id = "_".join(relative.replace("/", "__").split())
    return DocumentIn(id=doc_id, title=_title_of(text, path.stem), text=text)


def _from_jsonl(path: Path) -> Iterator[DocumentIn]:
    """BEIR `corpus.jsonl`: `_id`, `title`, `text` (and optional `metadata`) per line."""
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                doc_id = row.get("_id") or row["id"]
            except (ValueError, KeyError, TypeError, AttributeError):
                raise NotDocuments(
                    f"line {number} of {path} is not a BEIR corpus row: a JSON object with "
                    '"_id" (or "id"), "title" and "text"'
                ) from None
            text = str(row.get("text") or "")
            if not text.strip():
                log.warning("ingest_row_empty", path=str(path), line=number)
                continue
            yield DocumentIn(
                id=str(doc_id),
                title=str(row.get("title") or ""),
                text=text,
                metadata=row.get("metadata") or {},
            )


def load_documents(path: Path) -> Iterator[DocumentIn]:
    """Documents from a BEIR corpus.jsonl, one .md/.txt file, or a folder of them."""
    if path.is_dir():
        for file in sorted(p for p in path.rglob("*") if p.suffix.lower() in TEXT_SUFFIXES):
            document = _from_file(file, path)
            if document is not None:
                yield document
    elif path.suffix.lower() == ".jsonl":
        yield from _from_jsonl(path)
    elif path.suffix.lower() in TEXT_SUFFIXES:
        document = _from_file(path, path)
        if document is not None:
            yield document
    else:
        raise NotDocuments(f"cannot ingest {path}: ragbus reads {KINDS_READ}")
