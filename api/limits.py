"""What one request may cost the API process: its body's bytes, and the disk an upload spools
to. (How many requests one caller has running at once is `api.gate`'s.)

- `BodyLimit` (ASGI middleware): a multipart body may be `RAGBUS_MAX_REQUEST_BYTES`, any
  other `RAGBUS_MAX_JSON_BYTES`. A declared `Content-Length` over the limit is answered 413
  before a byte is kept; a body without one (chunked) is counted as it arrives, and the read
  that crosses the limit raises `BodyTooLarge` (a 413 through the app's error handler), so
  nothing past the limit is spooled or parsed. A client that sent `Expect: 100-continue`
  gets its 413 before it sends a byte; any other is still sending when the answer is ready,
  and would find the connection reset before reading it (HTTP/1.1 has no way to stop a
  body in flight), so up to one limit more of its body is read and dropped (`_drain`, for
  at most `DRAIN_S`) before the answer, as nginx's lingering close does: a client sending
  far more than that loses the connection instead.
- `check_spool_room`: an upload that would leave less than `RAGBUS_UPLOAD_MIN_FREE_MB` free
  where uploads spool (the temporary directory) is refused with 507 before it is read.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile

from fastapi import HTTPException, status
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.uploads import is_multipart
from infra.metrics import REFUSED_REQUESTS

DRAIN_S = 10.0
"""How long a refused body is read and dropped, at most, before its 413 is sent."""


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int, setting: str) -> None:
        super().__init__(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"the request body is over {limit:,} bytes, the largest taken ({setting})",
        )


def _limit(headers: Headers, max_request_bytes: int, max_json_bytes: int) -> tuple[int, str]:
    if is_multipart(headers):
        return max_request_bytes, "RAGBUS_MAX_REQUEST_BYTES"
    return max_json_bytes, "RAGBUS_MAX_JSON_BYTES"


def declared_length(headers: Headers) -> int | None:
    try:
        return int(headers["content-length"])
    except (KeyError, ValueError):
        return None


class BodyLimit:
    """The ASGI middleware above; the limits are read from the app's settings per request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        settings = scope["app"].state.settings
        headers = Headers(scope=scope)
        limit, setting = _limit(headers, settings.max_request_bytes, settings.max_json_bytes)
        declared = declared_length(headers)
        if declared is not None and declared > limit:
            REFUSED_REQUESTS.labels(reason="body_too_large").inc()
            waits = headers.get("expect", "").lower() == "100-continue"
            if not waits and declared <= 2 * limit:
                await drain(receive, declared)
            await refuse(send, BodyTooLarge(limit, setting))
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    REFUSED_REQUESTS.labels(reason="body_too_large").inc()
                    if message.get("more_body", False):
                        await drain(receive, limit)
                    raise BodyTooLarge(limit, setting)
            return message

        await self.app(scope, counted, send)


async def drain(receive: Receive, most: int) -> None:
    """Read and drop up to `most` bytes of the body, for at most `DRAIN_S` (see the module)."""
    dropped = 0
    try:
        async with asyncio.timeout(DRAIN_S):
            while dropped < most:
                message = await receive()
                if message["type"] != "http.request":
                    return
                dropped += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return
    except TimeoutError:
        return


async def refuse(send: Send, error: HTTPException, code: str = "too_large") -> None:
    """The app's error shape (`api.app._error`), sent from outside the app (with the error's
    headers): the connection is closed after it, any body left unread."""
    body = json.dumps(
        {"error": {"code": code, "message": str(error.detail)}}, separators=(",", ":")
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    headers += [(k.lower().encode(), v.encode()) for k, v in (error.headers or {}).items()]
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def check_spool_room(headers: Headers, max_request_bytes: int, min_free_mb: int) -> None:
    """507 when the upload (its Content-Length, else the largest request) would leave less
    than `min_free_mb` free where uploads are spooled."""
    if min_free_mb <= 0:
        return
    needed = declared_length(headers) or max_request_bytes
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if free - needed < min_free_mb * 1024 * 1024:
        REFUSED_REQUESTS.labels(reason="disk").inc()
        raise HTTPException(
            status.HTTP_507_INSUFFICIENT_STORAGE,
            f"the server has {free // 2**20:,} MiB free for uploads; this one could take "
            f"{needed // 2**20:,} MiB and leave less than {min_free_mb:,} MiB "
            "(RAGBUS_UPLOAD_MIN_FREE_MB): try again later",
            headers={"Retry-After": "60"},
        )
