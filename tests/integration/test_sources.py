"""Sources kept in sync, on a real stack (its own nats-server and redis-server) over a real
folder: a first sync, a re-sync that sends nothing, a touched file, a changed one, a move, a
deletion (0 orphans, counted in every store), real file events under `watch`, a sync killed
halfway and resumed, and a source removed with its documents."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts.sources import SyncSource
from launcher.layout import WORKER_KINDS
from launcher.runtime import Runtime
from tests.integration.conftest import own_services, running, serving_api
from tests.integration.polling import until

pytestmark = pytest.mark.integration


@dataclass
class Stack:
    url: str
    runtime: Runtime
    root: Path

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=60)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    base = tmp_path_factory.mktemp("sources")
    (base / "roots").mkdir()
    with own_services(
        base,
        source_roots=[base / "roots"],
        source_private_hosts=["127.0.0.1"],
        source_watch_debounce_s=0.05,
        source_min_every_s=1.0,
        max_file_bytes=1_000_000,
    ) as settings:
        yield settings


@pytest.fixture(scope="module")
async def stack(services: Any) -> AsyncIterator[Stack]:
    async with (
        running(services, orchestrator=True, workers=WORKER_KINDS) as runtime,
        serving_api(runtime) as url,
    ):
        yield Stack(url, runtime, Path(services.source_roots[0]))


def _page(marker: str) -> str:
    return (
        f"<html><head><title>Tide tables {marker}</title></head><body><article>"
        f"<h1>Tide tables</h1><p>The harbour's tide tables, reference {marker}, list high "
        "and low water for every day of the season, and the pilots read them each morning "
        "before the first ship comes in.</p></article></body></html>"
    )


def _note(marker: str) -> str:
    return (
        f"# Mooring rules\n\nEvery boat moored in the marina shows its permit {marker} on the "
        "port side. Moorings are checked at dawn by the harbour master.\n"
    )


async def _job(http: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        answer = await http.get(f"/v1/ingest/{job_id}")
        return answer.json() if answer.status_code == 200 else {"status": "unknown"}

    done = await until(
        read, timeout=120, satisfied=lambda j: j["status"] in ("completed", "failed")
    )
    assert done["status"] == "completed", done
    return done


async def _sync(http: httpx.AsyncClient, name: str) -> dict[str, Any]:
    answer = await http.post(f"/v1/sources/{name}/sync")
    assert answer.status_code == 202, answer.text
    return await _job(http, answer.json()["job_id"])


async def _last_sync(http: httpx.AsyncClient, name: str) -> dict[str, Any]:
    source = (await http.get(f"/v1/sources/{name}")).json()
    return dict(source["last_sync"]["counts"])


async def _hash(stack: Stack, namespace: str, document_id: str) -> str | None:
    assert stack.runtime.resources is not None
    vectors = await stack.runtime.resources.vectors()
    return await asyncio.to_thread(vectors.document_hash, namespace, document_id)


async def _leftovers(stack: Stack, namespace: str, ids: list[str]) -> dict[str, int]:
    from infra.runtime.files import FileStore
    from infra.sources.audit import leftovers

    resources = stack.runtime.resources
    assert resources is not None and stack.runtime.broker is not None
    js = stack.runtime.broker.connection.jetstream()
    return await leftovers(
        namespace,
        ids,
        vectors=await resources.vectors(),
        graph=await resources.graph(),
        files=FileStore(js, resources.settings, 5.0),
        redis=resources.redis(),
    )


async def test_a_folder_kept_in_sync(stack: Stack) -> None:
    folder = stack.root / "handbook"
    (folder / "rules").mkdir(parents=True)
    (folder / "rules" / "mooring.md").write_text(_note("MR-1001"))
    (folder / "tides.html").write_text(_page("TD-2001"))
    (folder / "drafts").mkdir()
    (folder / "drafts" / "draft.md").write_text(_note("DR-3001"))
    async with stack.http() as http:
        made = await http.post(
            "/v1/sources",
            json={
                "name": "handbook",
                "location": str(folder),
                "namespace": "harbour",
                "exclude": ["drafts/*"],
                "metadata": {"team": "port"},
            },
        )
        assert made.status_code == 201, made.text
        first = await _job(http, made.json()["job_id"])
        assert (first["documents_done"], first["documents_failed"]) == (2, 0), first
        mooring, tides = "handbook:rules__mooring.md", "handbook:tides.html"
        assert await _hash(stack, "harbour", mooring) and await _hash(stack, "harbour", tides)
        assert await _hash(stack, "harbour", "handbook:drafts__draft.md") is None  # excluded
        listed = (await http.get("/v1/documents", params={"namespace": "harbour"})).json()
        metadata = {d["id"]: d["metadata"] for d in listed["documents"]}
        assert metadata[mooring]["_source"] == "handbook"
        assert metadata[mooring]["team"] == "port"

        # nothing changed: a listing, nothing sent
        again = await _sync(http, "handbook")
        assert again["expected"] == 0, again
        assert (await _last_sync(http, "handbook"))["listed"] == 2

        # a new stat, the same bytes: read and hashed, never sent
        before = await _hash(stack, "harbour", mooring)
        stamp = (folder / "rules" / "mooring.md").stat().st_mtime + 30
        os.utime(folder / "rules" / "mooring.md", (stamp, stamp))
        touched = await _sync(http, "handbook")
        assert (touched["documents_unchanged"], touched["documents_done"]) == (1, 0), touched
        assert (await _last_sync(http, "handbook"))["touched"] == 1
        assert await _hash(stack, "harbour", mooring) == before

        # changed: replaced under its id
        (folder / "rules" / "mooring.md").write_text(_note("MR-1002"))
        changed = await _sync(http, "handbook")
        assert changed["documents_done"] == 1, changed
        assert await _hash(stack, "harbour", mooring) not in (None, before)

        # moved: the same bytes under a new path keep their document, nothing re-parsed
        tides_hash = await _hash(stack, "harbour", tides)
        (folder / "archive").mkdir()
        shutil.move(folder / "tides.html", folder / "archive" / "tides.html")
        moved = await _sync(http, "handbook")
        assert (moved["documents_done"], moved["documents_unchanged"]) == (0, 2), moved
        assert (await _last_sync(http, "handbook"))["moved"] == 1
        assert await _hash(stack, "harbour", tides) == tides_hash
        original = await http.get(f"/v1/documents/{tides}", params={"namespace": "harbour"})
        assert original.status_code == 200

        # deleted: nothing of it left in any store
        (folder / "archive" / "tides.html").unlink()
        gone = await _sync(http, "handbook")
        assert gone["documents_done"] == 1, gone
        assert await _leftovers(stack, "harbour", [tides]) == {
            "vector_points": 0,
            "graph_chunks": 0,
            "originals": 0,
            "catalogue_entries": 0,
            "quota_entries": 0,
        }

        # removed with its documents: the job deletes them, then the source goes
        removed = await http.delete("/v1/sources/handbook")
        assert removed.status_code == 202, removed.text
        await _job(http, removed.json()["job_id"])
        assert (await http.get("/v1/sources/handbook")).status_code == 404
        left = await _leftovers(stack, "harbour", [mooring, tides])
        assert set(left.values()) == {0}, left


async def test_watch_follows_file_events(stack: Stack) -> None:
    folder = stack.root / "live"
    folder.mkdir()
    (folder / "first.md").write_text(_note("LV-0001"))
    async with stack.http() as http:
        made = await http.post(
            "/v1/sources",
            json={"name": "live", "location": str(folder), "namespace": "live", "watch": True},
        )
        assert made.status_code == 201, made.text
        await _job(http, made.json()["job_id"])

        async def indexed(document_id: str) -> str | None:
            return await _hash(stack, "live", document_id)

        # written: indexed without anyone asking (the OS's file event)
        await asyncio.sleep(0.5)  # the watcher starts on the scheduler's next tick
        (folder / "second.md").write_text(_note("LV-0002"))
        assert await until(lambda: indexed("live:second.md"), timeout=30)
        old = await indexed("live:first.md")
        (folder / "first.md").write_text(_note("LV-0003"))
        assert await until(
            lambda: indexed("live:first.md"), timeout=30, satisfied=lambda h: h not in (None, old)
        )
        (folder / "second.md").unlink()
        assert (
            await until(
                lambda: indexed("live:second.md"), timeout=30, satisfied=lambda h: h is None
            )
            is None
        )
        assert (
            await http.delete("/v1/sources/live", params={"keep_documents": True})
        ).status_code == 204
        assert await indexed("live:first.md")  # kept


class _Killed(Exception):
    """What stands for a sync's process dying halfway (raised from its reader)."""


async def test_a_killed_sync_resumes_and_indexes_once(stack: Stack) -> None:
    from infra.runtime.ingest_jobs import read_job
    from infra.sources import sync as sync_module
    from infra.sources.kinds import FolderReader
    from infra.sources.registry import SourceRegistry

    folder = stack.root / "bulk"
    folder.mkdir()
    for n in range(24):
        (folder / f"note-{n:02d}.md").write_text(_note(f"BK-{n:04d}"))
    resources = stack.runtime.resources
    assert resources is not None and stack.runtime.broker is not None
    async with stack.http() as http:
        made = await http.post(
            "/v1/sources",
            json={"name": "bulk", "location": str(folder), "namespace": "bulk"},
        )
        assert made.status_code == 201, made.text
        await _job(http, made.json()["job_id"])
        for n in range(24):  # every file changes; the next sync dies after 10 reads
            (folder / f"note-{n:02d}.md").write_text(_note(f"BK-{n + 100:04d}"))
        reads = 0
        real_read = FolderReader.read

        def dying_read(self: FolderReader, path: str) -> bytes:
            nonlocal reads
            reads += 1
            if reads > 10:
                raise _Killed(path)
            return real_read(self, path)

        syncer = sync_module.SourceSyncer(
            resources.bus,
            resources.redis(),
            stack.runtime.broker.connection,
            resources.settings.model_copy(update={"source_sync_concurrency": 1}),
        )
        command = SyncSource(request_id="sync-killed-halfway", tenant="default", source="bulk")
        FolderReader.read = dying_read  # type: ignore[method-assign]
        try:
            with pytest.raises(_Killed):
                await syncer.handle(command)
        finally:
            FolderReader.read = real_read  # type: ignore[method-assign]
        run = (await http.get("/v1/sources/bulk")).json()["last_sync"]
        assert run["status"] == "publishing"  # its marks are in KV
        # the command comes again (JetStream redelivers what was never acknowledged)
        await syncer.handle(command)
        job = await _job(http, command.request_id)
        assert job["expected"] == 24
        assert job["documents_done"] + job["documents_unchanged"] == 24, job
        assert job["documents_failed"] == 0
        record = await read_job(resources.redis(), command.request_id)
        assert record is not None and not record["errors"]
        assert await SourceRegistry(resources.redis()).get("default", "bulk") is not None
        for n in (0, 23):
            assert await _hash(stack, "bulk", f"bulk:note-{n:02d}.md")


async def test_sources_are_refused_outside_the_roots(stack: Stack, tmp_path: Path) -> None:
    async with stack.http() as http:
        outside = await http.post(
            "/v1/sources", json={"name": "etc", "location": "/etc", "namespace": "x"}
        )
        assert outside.status_code == 422
        assert "RAGBUS_SOURCE_ROOTS" in outside.text or "not under" in outside.text
        escape = await http.post(
            "/v1/sources",
            json={"name": "up", "location": str(stack.root / ".." / ".."), "namespace": "x"},
        )
        assert escape.status_code == 422
        relative = await http.post(
            "/v1/sources", json={"name": "rel", "location": "docs", "namespace": "x"}
        )
        assert relative.status_code == 422
        link = stack.root / "link-out"
        link.symlink_to(tmp_path)
        via_link = await http.post(
            "/v1/sources", json={"name": "link", "location": str(link), "namespace": "x"}
        )
        assert via_link.status_code == 422
        too_often = await http.post(
            "/v1/sources",
            json={"name": "fast", "location": str(stack.root), "namespace": "x", "every_s": 0.5},
        )
        assert too_often.status_code == 422


async def test_the_cli_adds_lists_syncs_and_removes(stack: Stack) -> None:
    from tests.environment import child_environment

    folder = stack.root / "cli-notes"
    folder.mkdir()
    (folder / "one.md").write_text(_note("CL-0001"))
    env = child_environment()

    async def ragbus(*args: str) -> tuple[int, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cli",
            "source",
            *args,
            "--api",
            stack.url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
        out, _ = await process.communicate()
        return process.returncode or 0, out.decode()

    code, out = await ragbus(
        "add",
        "cli-notes",
        str(folder),
        "--namespace",
        "cli",
        "--metadata",
        '{"kind": "note"}',
        "--wait",
    )
    assert code == 0, out
    assert "completed: 1 indexed" in out
    (folder / "two.md").write_text(_note("CL-0002"))
    code, out = await ragbus("sync", "cli-notes")
    assert code == 0, out
    assert "completed: 1 indexed or deleted, 0 unchanged" in out
    code, out = await ragbus("list")
    assert code == 0 and "cli-notes:" in out and "2 listed" in out and "1 added" in out, out
    code, out = await ragbus("list", "--json")
    shown = {source["name"]: source for source in json.loads(out)}
    assert shown["cli-notes"]["metadata"] == {"kind": "note"}
    code, out = await ragbus("add", "cli-notes", str(folder))
    assert code != 0 and "exists" in out, out
    code, out = await ragbus("remove", "cli-notes", "--wait")
    assert code == 0 and "completed: 2 indexed or deleted" in out, out
    assert await _hash(stack, "cli", "cli-notes:one.md") is None


class _Site:
    """A web site on a local HTTP server whose pages a test changes: path -> (status,
    headers, body); `/robots.txt` and `/sitemap.xml` included."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.pages: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.requests: list[tuple[str, str]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body: bool) -> None:
                site.requests.append((self.command, self.path))
                status, headers, data = site.pages.get(self.path, (404, {}, b"not here"))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer(True)

            def do_HEAD(self) -> None:
                self._answer(False)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def page(self, path: str, marker: str, etag: str) -> None:
        headers = {"Content-Type": "text/html; charset=utf-8", "ETag": f'"{etag}"'}
        self.pages[path] = (200, headers, _page(marker).encode())

    def sitemap(self, *paths: str) -> None:
        urls = "".join(f"<url><loc>{self.url}{path}</loc></url>" for path in paths)
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'
        )
        self.pages["/sitemap.xml"] = (200, {"Content-Type": "application/xml"}, body.encode())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_a_web_site_kept_in_sync(stack: Stack) -> None:
    site = _Site()
    try:
        site.pages["/robots.txt"] = (200, {}, b"User-agent: *\nDisallow: /private/\n")
        site.page("/tides", "WB-1001", "t1")
        site.page("/moorings.html", "WB-2001", "m1")
        site.page("/old-fees", "WB-3001", "f1")
        site.page("/private/secret.html", "WB-9999", "s1")
        site.sitemap("/tides", "/moorings.html", "/old-fees", "/private/secret.html")
        async with stack.http() as http:
            made = await http.post(
                "/v1/sources",
                json={"name": "port-site", "kind": "web", "location": site.url, "namespace": "web"},
            )
            assert made.status_code == 201, made.text
            first = await _job(http, made.json()["job_id"])
            assert first["documents_done"] == 3, first  # robots.txt keeps /private/ out
            assert await _hash(stack, "web", "port-site:tides")
            assert await _hash(stack, "web", "port-site:private__secret.html") is None
            assert ("GET", "/private/secret.html") not in site.requests

            # unchanged: HEAD requests only, never a page's body
            site.requests.clear()
            again = await _sync(http, "port-site")
            assert again["expected"] == 0, again
            assert not [
                r
                for r in site.requests
                if r[0] == "GET" and r[1] not in ("/robots.txt", "/sitemap.xml")
            ]

            # a page changes, one vanishes, one redirects to a new address
            site.page("/tides", "WB-1002", "t2")
            site.pages["/moorings.html"] = (404, {}, b"gone")
            site.sitemap("/tides", "/old-fees", "/fees")
            site.pages["/old-fees"] = (301, {"Location": "/fees"}, b"")
            site.page("/fees", "WB-3002", "f2")
            changed = await _sync(http, "port-site")
            assert changed["documents_failed"] == 0, changed
            counts = await _last_sync(http, "port-site")
            assert (counts["changed"], counts["deleted"]) == (1, 2), counts
            assert counts["added"] == 1, counts
            assert await _hash(stack, "web", "port-site:moorings.html") is None
            assert await _hash(stack, "web", "port-site:old-fees") is None
            assert await _hash(stack, "web", "port-site:fees")

            # a site on a private address the operator did not name is refused
            refused = await http.post(
                "/v1/sources",
                json={
                    "name": "meta",
                    "kind": "web",
                    "location": "http://169.254.169.254/",
                    "namespace": "web",
                },
            )
            assert refused.status_code == 422 and "RAGBUS_SOURCE_PRIVATE_HOSTS" in refused.text
            removed = await http.delete("/v1/sources/port-site")
            await _job(http, removed.json()["job_id"])
    finally:
        site.close()


@pytest.fixture(scope="module")
def bucket_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3-compatible server, on a free port: it runs from PyPI on these machines (no
    MinIO here), answers the S3 API botocore speaks, ETags included."""
    import subprocess
    import time

    from infra.runtime.services import free_port

    port = free_port()
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.2)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(10)


async def test_a_bucket_kept_in_sync(stack: Stack, bucket_server: str) -> None:
    import s3fs

    keys = {"access_key_id": "testing", "secret_access_key": "testing-secret"}
    fs = s3fs.S3FileSystem(
        key=keys["access_key_id"],
        secret=keys["secret_access_key"],
        endpoint_url=bucket_server,
        skip_instance_cache=True,
        use_listings_cache=False,
    )
    fs.mkdir("port-docs")
    fs.pipe_file("port-docs/handbook/rules.md", _note("S3-0001").encode())
    fs.pipe_file("port-docs/handbook/tides.html", _page("S3-0002").encode())
    fs.pipe_file("port-docs/other/skip.md", _note("S3-0003").encode())
    async with stack.http() as http:
        made = await http.post(
            "/v1/sources",
            json={
                "name": "bucket",
                "kind": "s3",
                "location": "s3://port-docs/handbook",
                "namespace": "s3",
                "s3": {"endpoint_url": bucket_server, "region": "us-east-1", **keys},
            },
        )
        assert made.status_code == 201, made.text
        first = await _job(http, made.json()["job_id"])
        assert first["documents_done"] == 2, first
        shown = (await http.get("/v1/sources/bucket")).json()
        assert shown["s3"]["secret_access_key"] == "**********"
        assert await _hash(stack, "s3", "bucket:rules.md")
        again = await _sync(http, "bucket")
        assert again["expected"] == 0, again
        fs.pipe_file("port-docs/handbook/rules.md", _note("S3-0004").encode())
        fs.rm("port-docs/handbook/tides.html")
        changed = await _sync(http, "bucket")
        assert changed["documents_done"] == 2, changed
        assert await _leftovers(stack, "s3", ["bucket:tides.html"]) == {
            "vector_points": 0,
            "graph_chunks": 0,
            "originals": 0,
            "catalogue_entries": 0,
            "quota_entries": 0,
        }


async def test_a_hostile_site_costs_its_own_sync_and_nothing_else(stack: Stack) -> None:
    """Entities in a sitemap, redirect loops, a redirect out of the site, a page over the
    file limit: each is refused with its reason, the rest of the site is indexed, and a
    question on another namespace is served meanwhile."""
    site = _Site()
    try:
        bomb = (
            '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
            '<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">'
            '<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>'
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            "<url><loc>&lol3;</loc></url></urlset>"
        )
        site.pages["/bomb.xml"] = (200, {"Content-Type": "application/xml"}, bomb.encode())
        index = (
            '<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<sitemap><loc>{site.url}/bomb.xml</loc></sitemap>"
            f"<sitemap><loc>{site.url}/pages.xml</loc></sitemap></sitemapindex>"
        )
        site.pages["/sitemap.xml"] = (200, {"Content-Type": "application/xml"}, index.encode())
        urls = "".join(
            f"<url><loc>{site.url}{path}</loc></url>"
            for path in ("/fine", "/huge", "/away", "/loop-a")
        )
        pages = f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'
        site.pages["/pages.xml"] = (200, {"Content-Type": "application/xml"}, pages.encode())
        site.page("/fine", "HS-0001", "ok1")
        huge = b"<html><body>" + b"x" * 1_200_000 + b"</body></html>"
        site.pages["/huge"] = (200, {"Content-Type": "text/html", "ETag": '"h1"'}, huge)
        site.pages["/away"] = (302, {"Location": "http://169.254.169.254/latest/"}, b"")
        site.pages["/loop-a"] = (302, {"Location": "/loop-b"}, b"")
        site.pages["/loop-b"] = (302, {"Location": "/loop-a"}, b"")
        async with stack.http() as http:
            made = await http.post(
                "/v1/sources",
                json={"name": "hostile", "kind": "web", "location": site.url, "namespace": "hs"},
            )
            assert made.status_code == 201, made.text
            job_id = made.json()["job_id"]
            probe = await http.post(
                "/v1/queries", json={"query": "mooring permits", "namespaces": ["harbour"]}
            )
            assert probe.status_code == 202
            job = await _job(http, job_id)
            assert (job["documents_done"], job["documents_failed"]) == (1, 1), job
            assert "RAGBUS_MAX_FILE_BYTES" in " ".join(job["errors"].values()), job["errors"]
            counts = await _last_sync(http, "hostile")
            assert counts["skipped"] >= 3, counts  # the loop, the way out, the huge page
            assert await _hash(stack, "hs", "hostile:fine")

            async def answered() -> str:
                status = await http.get(f"/v1/queries/{probe.json()['request_id']}")
                return str(status.json().get("status"))

            ended = ("completed", "failed", "timed_out", "cancelled")
            assert await until(answered, timeout=60, satisfied=lambda s: s in ended) == "completed"
            again = await _sync(http, "hostile")
            assert again["expected"] == 0, again  # the huge page waits until it changes
    finally:
        site.close()
