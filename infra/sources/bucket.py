"""An S3-compatible bucket as a source (`kind: s3`, `s3://bucket/prefix`), read through fsspec's
S3 file system (s3fs, on botocore): one listing of the prefix gives every object's ETag and
size, so an unchanged object costs its line in the listing and nothing more.

fsspec is the file-system interface here because it already speaks S3, GCS, Azure, HTTP and
more with one API (`find`, `cat_file`): a bucket of another cloud is this module with another
protocol. The folder kind keeps its own walk (`infra.runtime.ingest_tree`), which never
follows a link out of the folder.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import PurePosixPath
from typing import Any

import s3fs

from contracts.sources import S3Options, SourceRecord
from infra.runtime.ingest_tree import Skipped
from infra.sources.kinds import KINDS_READ, Listed, NamedPaths, wanted
from infra.sources.network import check_url


class BucketReader(NamedPaths):
    def __init__(self, record: SourceRecord, allowed_private: Sequence[str] = ()) -> None:
        options = record.s3 or S3Options()
        if options.endpoint_url:
            check_url(options.endpoint_url, allowed_private)
        self.root = record.location.removeprefix("s3://").strip("/")
        self.include, self.exclude = tuple(record.include), tuple(record.exclude)
        client: dict[str, Any] = {}
        if options.region:
            client["region_name"] = options.region
        secret = options.secret_access_key
        self.fs = s3fs.S3FileSystem(
            anon=options.anonymous,
            key=options.access_key_id,
            secret=secret.get_secret_value() if secret is not None else None,
            endpoint_url=options.endpoint_url,
            client_kwargs=client,
            skip_instance_cache=True,
            use_listings_cache=False,
        )

    def listing(self, skipped: list[Skipped]) -> Iterator[Listed]:
        try:
            found = self.fs.find(self.root, detail=True)
        except FileNotFoundError as exc:
            raise OSError(f"s3://{self.root} does not exist ({exc})") from exc
        except Exception as exc:  # botocore's: no access, no such bucket, no endpoint
            raise OSError(f"s3://{self.root} cannot be listed: {exc}") from exc
        for key in sorted(found):
            info = found[key]
            if info.get("type") != "file":
                continue
            path = key[len(self.root) :].lstrip("/") if key.startswith(self.root) else key
            if PurePosixPath(path).suffix.lower() not in KINDS_READ:
                continue
            if not wanted(path, self.include, self.exclude):
                continue
            size = int(info.get("size") or info.get("Size") or 0)
            etag = str(info.get("ETag") or info.get("etag") or "")
            modified = str(info.get("LastModified") or "")
            yield Listed(path, f"etag:{etag}:{size}:{modified}", size)

    def read(self, path: str) -> bytes:
        try:
            data: bytes = self.fs.cat_file(f"{self.root}/{path}")
        except OSError:
            raise
        except Exception as exc:
            raise OSError(f"{path}: {exc}") from exc
        return data
