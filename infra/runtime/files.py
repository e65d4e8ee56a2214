"""Uploaded files in the JetStream object store (`RAG_FILES`): the claim checks of the parse
worker's messages, and the originals the API hands back.

A file never travels in a message: the producer (`POST /v1/documents`, `ragbus ingest`) puts
its bytes here under `<store namespace>/<document id>` and sends a `FileRef` (bucket, name,
sha256, size, the name it was uploaded under, the media type it was declared as); the parse
worker gets the bytes back by that reference. The latest upload of a document is its
original: a newer upload of the same document replaces the object, and a reference to the
older bytes then finds a different sha256 (`FileReplaced`). Deleting a document deletes its
file (`delete_file`).

The object's headers keep what `GET /v1/documents/{id}` answers with (the file name and
media type), so reading an original needs no message: `open_original` hands it out a chunk
at a time (`Original.chunks`), each chunk a JetStream direct get by subject and sequence,
the next asked for only once the caller has taken the last: an API serving large originals
holds one chunk of each in memory, not the file. `put` takes a file object as well as bytes,
read a chunk at a time, so an upload spooled to disk reaches the store without being read
whole.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import BinaryIO, TypeVar

import nats.js.errors
from nats.js import JetStreamContext, api
from nats.js.object_store import ObjectStore

from contracts import subjects as sj
from contracts.ingest import FileRef
from infra.logging import get_logger
from infra.runtime.bus import PUBLISH_RETRY_S, until_jetstream_answers
from infra.runtime.topology import declare_files_bucket
from infra.settings import Settings

log = get_logger(__name__)

T = TypeVar("T")

FILENAME_HEADER = "Ragbus-Filename"
MEDIA_TYPE_HEADER = "Content-Type"
SHA256_HEADER = "Ragbus-Sha256"
DEFAULT_MEDIA_TYPE = "application/octet-stream"


class FileUnavailable(LookupError):
    """A referenced file cannot be had: the message that names it can never be served."""


class FileMissing(FileUnavailable):
    """No file is stored for the document: never uploaded, or deleted since."""


class FileReplaced(FileUnavailable):
    """The document's stored file is no longer the referenced one: a newer upload of the
    same document replaced it (its own job parses it)."""


def object_name(namespace: str, document_id: str) -> str:
    """Where a document's file is kept: `<store namespace>/<document id>`. Object names are
    sent base64-encoded in their subjects, so a document id's characters are all safe."""
    return f"{namespace}/{document_id}"


@dataclass(frozen=True)
class Original:
    """An original as the API serves it: what it is, and its bytes to come (`chunks`)."""

    filename: str
    media_type: str
    sha256: str
    size: int
    chunks: AsyncIterator[bytes]
    """Its bytes, a chunk at a time; raises `FileReplaced` at the end when what was read is
    not what the object's digest says (a newer upload replaced it meanwhile)."""


def _header(info: api.ObjectInfo, name: str) -> str:
    """One header of an object's meta: a list of values as Go clients write it, or a string."""
    value = (info.headers or {}).get(name)
    if isinstance(value, list):
        value = value[0] if value else None
    return str(value) if value else ""


def _hex_digest(info: api.ObjectInfo) -> str:
    """An object's `SHA-256=<base64url>` digest as lowercase hex ('' when it has none)."""
    digest = (info.digest or "").split("=", 1)[-1] if info.digest else ""
    if not digest:
        return ""
    try:
        return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    except (binascii.Error, ValueError):
        return ""


def _file_digest(file: BinaryIO) -> str:
    digest = hashlib.sha256()
    file.seek(0)
    while chunk := file.read(1024 * 1024):
        digest.update(chunk)
    return digest.hexdigest()


class FileStore:
    """The `RAG_FILES` bucket, opened (or made) on first use."""

    def __init__(
        self, js: JetStreamContext, settings: Settings, retry_s: float = PUBLISH_RETRY_S
    ) -> None:
        self._js = js
        self._settings = settings
        self._retry_s = retry_s
        self._bucket: ObjectStore | None = None

    async def bucket(self) -> ObjectStore:
        if self._bucket is None:
            self._bucket = await self._retried(
                lambda: declare_files_bucket(self._js, self._settings), "files_bucket_retried"
            )
        return self._bucket

    async def _retried(self, call: Callable[[], Awaitable[T]], event: str) -> T:
        """`call` again while JetStream cannot answer it (a late ack, a stream electing its
        leader), for up to the publish retry budget."""
        return await until_jetstream_answers(
            call, self._retry_s, first_delay_s=0.2, max_delay_s=2.0, event=event
        )

    async def put(
        self,
        namespace: str,
        document_id: str,
        data: bytes | BinaryIO,
        filename: str,
        media_type: str = "",
        sha256: str | None = None,
    ) -> FileRef:
        """Store a document's file (replacing an earlier upload of it); its reference. `data`
        is the bytes, or a seekable file read from its start a chunk at a time, whose
        `sha256` the caller took as it checked it (else it is read once more for it)."""
        store = await self.bucket()
        name = object_name(namespace, document_id)
        if isinstance(data, bytes):
            sha256, size = hashlib.sha256(data).hexdigest(), len(data)
        else:
            size = data.seek(0, io.SEEK_END)
            sha256 = sha256 or _file_digest(data)
        media_type = media_type[:128]
        headers: dict[str, list[str]] = {FILENAME_HEADER: [filename], SHA256_HEADER: [sha256]}
        if media_type:
            headers[MEDIA_TYPE_HEADER] = [media_type]

        async def put() -> api.ObjectInfo:
            meta = api.ObjectMeta(name=name, headers=headers)
            if isinstance(data, bytes):
                return await store.put(name, data, meta=meta)
            data.seek(0)
            return await store.put(name, data, meta=meta)  # type: ignore[arg-type]

        # a retry uploads the whole file again under a fresh object id: the meta message,
        # published last, decides which copy is the object
        info = await self._retried(put, "file_put_retried")
        if _hex_digest(info) != sha256:  # the file changed between its check and now
            raise FileReplaced(f"{filename} changed while it was stored")
        log.info("file_stored", object=name, bytes=size, filename=filename)
        return FileRef(
            bucket=sj.FILES_BUCKET,
            name=name,
            sha256=sha256,
            size=size,
            filename=filename,
            media_type=media_type,
        )

    async def get(self, ref: FileRef) -> bytes:
        """The referenced file's bytes. `FileMissing` when nothing is stored under its name,
        `FileReplaced` when what is stored there now is another upload."""
        store = await self._open(ref.bucket)
        try:
            info = await self._retried(lambda: store.get_info(ref.name), "file_get_retried")
        except nats.js.errors.NotFoundError:
            raise FileMissing(f"no file is stored as {ref.name!r} (deleted?)") from None
        if _hex_digest(info) != ref.sha256:
            raise FileReplaced(
                f"{ref.name!r} was uploaded again since this job: a newer upload replaced it"
            )
        try:
            result = await self._retried(lambda: store.get(ref.name), "file_get_retried")
        except nats.js.errors.NotFoundError:
            raise FileMissing(f"no file is stored as {ref.name!r} (deleted?)") from None
        except nats.js.errors.DigestMismatchError:  # replaced while it was read
            raise FileReplaced(f"{ref.name!r} was replaced while it was read") from None
        data = result.data or b""
        if hashlib.sha256(data).hexdigest() != ref.sha256:
            raise FileReplaced(f"{ref.name!r} was replaced while it was read")
        return data

    async def open_original(self, namespace: str, document_id: str) -> Original | None:
        """A document's original file to stream (`Original.chunks`), or None when it has
        none (sent as text, deleted)."""
        store = await self.bucket()
        name = object_name(namespace, document_id)
        try:
            info = await self._retried(lambda: store.get_info(name), "file_get_retried")
        except nats.js.errors.NotFoundError:
            return None
        if info.deleted or not info.nuid:
            return None
        return Original(
            filename=_header(info, FILENAME_HEADER) or document_id,
            media_type=_header(info, MEDIA_TYPE_HEADER) or DEFAULT_MEDIA_TYPE,
            sha256=_hex_digest(info),
            size=int(info.size or 0),
            chunks=self._chunks(info),
        )

    async def _chunks(self, info: api.ObjectInfo) -> AsyncIterator[bytes]:
        """The object's chunks in order, one direct get each (`next_by_subj` from the last
        one's sequence), checked against its digest at the end."""
        subject = f"$O.{sj.FILES_BUCKET}.C.{info.nuid}"
        stream = f"OBJ_{sj.FILES_BUCKET}"
        digest = hashlib.sha256()
        sequence = 0
        for _ in range(int(info.chunks or 0)):
            after = sequence + 1

            async def next_chunk(after: int = after) -> api.RawStreamMsg:
                try:
                    return await self._js.get_msg(
                        stream, seq=after, subject=subject, next=True, direct=True
                    )
                except nats.js.errors.NotFoundError:
                    # a direct get may be answered by a replica a moment behind the leader
                    # (a cluster, an object just stored): the leader's word is final
                    return await self._js.get_msg(stream, seq=after, subject=subject, next=True)

            try:
                message = await self._retried(next_chunk, "file_get_retried")
            except nats.js.errors.NotFoundError:
                raise FileReplaced(f"{info.name!r} was replaced while it was read") from None
            sequence = int(message.seq or after)
            chunk = message.data or b""
            digest.update(chunk)
            yield chunk
        if digest.hexdigest() != _hex_digest(info):
            raise FileReplaced(f"{info.name!r} was replaced while it was read")

    async def delete(self, namespace: str, document_id: str) -> bool:
        """Delete a document's file; False when it had none."""
        store = await self.bucket()
        name = object_name(namespace, document_id)
        try:
            await self._retried(lambda: store.delete(name), "file_delete_retried")
        except nats.js.errors.NotFoundError:
            return False
        log.info("file_deleted", object=name)
        return True

    async def _open(self, bucket: str) -> ObjectStore:
        if bucket == sj.FILES_BUCKET:
            return await self.bucket()
        try:  # a reference into another bucket: read it, never make it
            return await self._js.object_store(bucket)
        except nats.js.errors.BucketNotFoundError:
            raise FileMissing(f"no object store {bucket!r}") from None
