"""What one request may cost the API, on a real nats-server and redis-server (issue 54): a body
over its limit is refused from its Content-Length, or as it arrives without one; a multipart
upload stops once its files pass the bytes the tenant has left; a tenant's transfers at once
are bounded; an upload that would leave too little disk is refused unread; an original is
streamed back a chunk at a time; nested metadata is a 422, never a 500."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest

from api.app import create_app
from infra.runtime.topology import declare_topology
from infra.settings import Settings
from tests.integration.conftest import own_services, serving

pytestmark = pytest.mark.integration

KIB = 1024
MIB = 1024 * KIB


@pytest.fixture(scope="module")
async def services(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Settings]:
    """A nats-server with the bus's streams and no worker (the parse messages wait), and a
    redis-server."""
    with own_services(tmp_path_factory.mktemp("limits")) as settings:
        nc = await nats.connect(settings.nats_url)
        try:
            await declare_topology(nc.jetstream(), settings)
        finally:
            await nc.close()
        yield settings


def limited(settings: Settings, **overrides: Any) -> Settings:
    return settings.model_copy(update=overrides)


async def _client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        serving(create_app(settings)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        yield http


@pytest.fixture(scope="module")
async def http(services: Settings) -> AsyncIterator[httpx.AsyncClient]:
    settings = limited(
        services,
        max_file_bytes=2 * MIB,
        max_request_bytes=3 * MIB,
        max_json_bytes=256 * KIB,
        tenant_max_transfers=2,
        quota_bytes=5 * MIB,
        quota_requests_per_s=0,
        upload_min_free_mb=0,
    )
    async for client in _client(settings):
        yield client


def text_file(name: str, size: int, fill: bytes = b"words and more words\n") -> tuple[str, bytes]:
    return name, (fill * (size // len(fill) + 1))[:size]


def parts(*files: tuple[str, bytes]) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("files", (name, data, "text/plain")) for name, data in files]


async def test_a_declared_length_over_the_limit_is_refused_unread(
    http: httpx.AsyncClient,
) -> None:
    # the headers alone, as a client waiting on `Expect: 100-continue` sends them: the 413
    # comes before a byte of the body was sent
    url = httpx.URL(str(http.base_url))
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        writer.write(
            b"POST /v1/documents HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Type: multipart/form-data; boundary=b\r\n"
            + f"Content-Length: {64 * MIB}\r\n\r\n".encode()
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        body = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 413"), head
    error = json.loads(body)["error"]
    assert error["code"] == "too_large"
    assert "RAGBUS_MAX_REQUEST_BYTES" in error["message"]


async def test_a_chunked_body_is_counted_as_it_arrives(http: httpx.AsyncClient) -> None:
    boundary = "limitsboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="a.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()

    async def body() -> AsyncIterator[bytes]:  # no Content-Length: sent chunked
        yield head
        for _ in range(2 * 4 * 16):  # 8 MiB of one file, then never the end
            yield b"y" * (64 * KIB)

    response = await http.post(
        "/v1/documents",
        content=body(),
        headers={"content-type": f"multipart/form-data; boundary={boundary}"},
    )
    assert response.status_code == 413
    message = response.json()["error"]["message"]
    assert "RAGBUS_MAX_FILE_BYTES" in message or "RAGBUS_MAX_REQUEST_BYTES" in message


async def test_many_files_under_the_file_limit_are_over_the_request_limit(
    http: httpx.AsyncClient,
) -> None:
    files = [text_file(f"f{i}.txt", 900 * KIB) for i in range(5)]  # 4.4 MiB, each under 2
    response = await http.post("/v1/documents", files=parts(*files))
    assert response.status_code == 413, response.text
    assert "RAGBUS_MAX_REQUEST_BYTES" in response.json()["error"]["message"]


async def test_a_json_body_over_its_limit_is_refused(http: httpx.AsyncClient) -> None:
    documents = [{"id": f"d{i}", "title": "t", "text": "w " * 20_000} for i in range(10)]
    response = await http.post("/v1/documents", json={"documents": documents})
    assert response.status_code == 413
    assert "RAGBUS_MAX_JSON_BYTES" in response.json()["error"]["message"]


async def test_files_past_the_bytes_the_tenant_has_left_stop_the_upload(
    services: Settings,
) -> None:
    settings = limited(
        services,
        quota_bytes=2 * MIB,
        quota_requests_per_s=0,
        upload_min_free_mb=0,
        max_request_bytes=16 * MIB,
        redis_url=services.redis_url.rsplit("/", 1)[0] + "/3",
    )
    async for http in _client(settings):
        first = await http.post(
            "/v1/documents",
            files=parts(text_file("kept.txt", 1536 * KIB)),
            data={"namespace": "q"},
        )
        assert first.status_code == 202, first.text
        # 1.5 MiB kept of 2: three files of 800 KiB cannot fit
        over = await http.post(
            "/v1/documents",
            data={"namespace": "q"},
            files=parts(*[text_file(f"n{i}.txt", 800 * KIB) for i in range(3)]),
        )
        assert over.status_code == 429, over.text
        assert "left to keep" in over.json()["error"]["message"]
        # the same document sent again replaces its bytes: it fits
        again = await http.post(
            "/v1/documents",
            data={"namespace": "q"},
            files=parts(text_file("kept.txt", 1800 * KIB, fill=b"other words\n")),
        )
        assert again.status_code == 202, again.text


async def test_an_upload_that_would_leave_too_little_disk_is_refused(
    services: Settings,
) -> None:
    settings = limited(services, upload_min_free_mb=2**30, quota_requests_per_s=0)
    async for http in _client(settings):
        response = await http.post("/v1/documents", files=parts(text_file("a.txt", 1000)))
        assert response.status_code == 507
        assert response.headers["retry-after"]
        assert "RAGBUS_UPLOAD_MIN_FREE_MB" in response.json()["error"]["message"]


async def test_originals_stream_back_whole_and_transfers_are_bounded(
    http: httpx.AsyncClient,
) -> None:
    data = os.urandom(1536 * KIB)
    name = "blob.txt"
    payload = (b"line of text\n" * 200_000)[: len(data)]
    accepted = await http.post(
        "/v1/documents", files=parts((name, payload)), data={"namespace": "dl"}
    )
    assert accepted.status_code == 202, accepted.text
    url = f"/v1/documents/{name}?namespace=dl"
    whole = await http.get(url)
    assert whole.status_code == 200
    assert whole.content == payload
    assert whole.headers["content-length"] == str(len(payload))

    # two slow readers hold the tenant's two transfer slots: a third is refused
    async with http.stream("GET", url) as one, http.stream("GET", url) as two:
        assert one.status_code == two.status_code == 200
        third = await http.get(url)
        assert third.status_code == 429
        assert third.headers["retry-after"] == "1"
        assert "RAGBUS_TENANT_MAX_TRANSFERS" in third.json()["error"]["message"]
        first_chunk = await one.aiter_bytes().__anext__()
        assert payload.startswith(first_chunk)
    # both closed, one unread: their slots are free again
    for _ in range(50):
        if (await http.get(url)).status_code == 200:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the transfer slots were not given back")


async def test_nested_metadata_is_a_422_not_a_500(http: httpx.AsyncClient) -> None:
    deep_form = "[" * 30_000 + "]" * 30_000
    too_deep = {"a": json.loads("[" * 20 + "]" * 20)}
    for raw in (deep_form[:16_000] + deep_form[-16_000:], json.dumps(too_deep)):
        response = await http.post(
            "/v1/documents",
            files=parts(text_file("n.txt", 100)),
            data={"metadata": raw},
        )
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "metadata"
    as_json = await http.post(
        "/v1/documents",
        json={"documents": [{"id": "n", "title": "t", "text": "x", "metadata": too_deep}]},
    )
    assert as_json.status_code == 422, as_json.text
    assert "nested more than 16 levels" in as_json.text
    raw_deep = b'{"documents": [{"id": "n", "text": "x", "metadata": {"a": ' + b"[" * 5000
    raw_deep += b"]" * 5000 + b"}}]}"
    parsed = await http.post(
        "/v1/documents", content=raw_deep, headers={"content-type": "application/json"}
    )
    assert parsed.status_code in (400, 422), parsed.text


def test_the_request_limit_holds_the_largest_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="RAGBUS_MAX_REQUEST_BYTES must be at least"):
        Settings(max_file_bytes=10 * MIB, max_request_bytes=5 * MIB, data_dir=tmp_path)
