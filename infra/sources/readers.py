"""The reader of each kind of source (`infra.sources.kinds.SourceReader`): a folder, a web site
or a bucket. A new kind is a module with a reader, and a line here."""

from __future__ import annotations

from contracts.sources import SourceRecord
from infra.settings import Settings
from infra.sources.kinds import FolderReader, SourceReader, SourceRefused


def reader_for(record: SourceRecord, settings: Settings) -> SourceReader:
    """The reader of `record`'s kind, as the settings allow it (`SourceRefused` otherwise)."""
    private = settings.source_private_hosts or ()
    if record.kind == "folder":
        return FolderReader.of(record, settings.source_roots or ())
    if record.kind == "web":
        from infra.sources.web import WebReader

        return WebReader(record, private, settings.max_file_bytes)
    if record.kind == "s3":
        from infra.sources.bucket import BucketReader

        return BucketReader(record, private)
    raise SourceRefused(f"no reader for sources of kind {record.kind!r}")
