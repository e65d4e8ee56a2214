"""`CallerGate`: how many requests one caller has running at once, counted at the door.

A request that reaches a route costs the API process about 4 ms of CPU before it can be
refused (routing, dependencies, the key looked up and the rate taken in Redis): one caller's
200 parallel downloads held every other caller's requests, `/healthz` included, for close to
a second (issue 54). So this ASGI middleware, before anything else of the app, counts each
caller's requests in flight in this process and refuses the one past a limit with 429 and
`Retry-After: 1`, for about a tenth of that cost:

- file transfers (`GET /v1/documents/{id}`, a download; `POST /v1/documents` as multipart, an
  upload) at most `RAGBUS_TENANT_MAX_TRANSFERS` at once, from the first byte asked to the last
  byte sent, so a caller's parallel GETs of one large original cannot hold the process's
  memory, nor its uploads its disk;
- any requests at most `RAGBUS_CALLER_MAX_REQUESTS` at once (event streams included).

A caller is the key it presents (a bearer key, or the web page's cookie on a GET), hashed; an
API request without one (`none` mode: a `/v1` route, or MCP at `/mcp`) is its address's; other
requests without one
(`/healthz`, `/readyz`, the web page's files) are not counted. A wrong
key is counted as a caller of its own, and refused by `api.auth` (whose wrong keys slow their
address). The route's own checks (the tenant's rate, its limits) come after, as before.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter

from fastapi import HTTPException, status
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from api.auth import TOKEN_COOKIE
from api.limits import declared_length, drain, refuse
from api.uploads import is_multipart
from infra.metrics import REFUSED_REQUESTS

RETRY_AFTER_S = 1
DRAIN_BYTES = 8 * 1024 * 1024
"""How much of a refused upload's body is read and dropped so its client can read the 429
(`api.limits.drain`); past it the connection is closed."""
_DOWNLOAD = re.compile(r"^/v1/documents/[^/]+$")
_API = re.compile(r"^/(?:v1/|mcp(?:/|$))")
"""The paths whose callers are counted without a key: the `/v1` routes and MCP's door."""
_COOKIE = re.compile(rf"(?:^|;\s*){TOKEN_COOKIE}=([^;]*)")


def caller_key(scope: Scope, headers: Headers) -> str | None:
    """Who is asking, as far as the door can tell: a digest of the key presented; for an API
    request without one (`none` mode), its address."""
    offered = headers.get("authorization", "")
    if not offered and scope["method"] in ("GET", "HEAD"):
        found = _COOKIE.search(headers.get("cookie", ""))
        offered = found.group(1) if found else ""
    if offered:
        return hashlib.sha256(offered.encode()).hexdigest()
    if _API.match(scope["path"]) and scope.get("client"):
        return f"address:{scope['client'][0]}"
    return None


def is_transfer(scope: Scope, headers: Headers) -> bool:
    method, path = scope["method"], scope["path"]
    if method in ("GET", "HEAD"):
        return _DOWNLOAD.match(path) is not None
    return method == "POST" and path == "/v1/documents" and is_multipart(headers)


class CallerGate:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.requests: Counter[str] = Counter()
        self.transfers: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        key = caller_key(scope, headers)
        if key is None:
            await self.app(scope, receive, send)
            return
        settings = scope["app"].state.settings
        transfer = is_transfer(scope, headers)
        refusal = None
        if self.requests[key] >= settings.caller_max_requests:
            refusal = (
                f"{self.requests[key]} requests of this caller are running; at most "
                f"{settings.caller_max_requests} run at once (RAGBUS_CALLER_MAX_REQUESTS)",
                "requests",
            )
        elif transfer and self.transfers[key] >= settings.tenant_max_transfers:
            refusal = (
                f"{self.transfers[key]} file transfers of this caller are running; at most "
                f"{settings.tenant_max_transfers} run at once (RAGBUS_TENANT_MAX_TRANSFERS): "
                "send this one again when one has finished",
                "transfers",
            )
        if refusal is not None:
            message, reason = refusal
            REFUSED_REQUESTS.labels(reason=reason).inc()
            declared = declared_length(headers) or 0
            if declared and headers.get("expect", "").lower() != "100-continue":
                await drain(receive, min(declared, DRAIN_BYTES))
            error = HTTPException(
                status.HTTP_429_TOO_MANY_REQUESTS,
                message,
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
            await refuse(send, error, code="too_many_requests")
            return
        self.requests[key] += 1
        if transfer:
            self.transfers[key] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            _less(self.requests, key)
            if transfer:
                _less(self.transfers, key)


def _less(counts: Counter[str], key: str) -> None:
    counts[key] -= 1
    if counts[key] <= 0:
        del counts[key]
