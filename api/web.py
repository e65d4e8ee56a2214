"""The web page: `GET /` and its static files under `/ui/`, outside the OpenAPI schema.

Everything the page needs ships in `api/static/` (no CDN, no build step: ES modules and CSS).
Each response carries a strict Content-Security-Policy — no inline script or style, nothing
fetched from elsewhere — so text from the API that reached the DOM as markup still could not
run; the page itself only ever inserts API data as text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, status
from fastapi import Path as PathParam
from fastapi.responses import FileResponse

STATIC_DIR = Path(__file__).resolve().parent / "static"

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidate every time: a new release's modules are never mixed with an old page.
    "Cache-Control": "no-cache",
}
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".json": "application/json",
}
"""Spelled out rather than guessed by `mimetypes`: with `nosniff`, a module script served
under another type (some systems map `.js` to `text/plain`) would not run."""

router = APIRouter(include_in_schema=False)


def _file(path: Path) -> FileResponse:
    media_type = MEDIA_TYPES.get(path.suffix)
    if media_type is None or not path.is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such file")
    return FileResponse(path, media_type=media_type, headers=SECURITY_HEADERS)


@router.api_route("/", methods=["GET", "HEAD"])
async def index() -> FileResponse:
    return _file(STATIC_DIR / "index.html")


@router.api_route("/ui/{name}", methods=["GET", "HEAD"])
async def static_file(
    name: Annotated[str, PathParam(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}$")],
) -> FileResponse:
    """One file of `api/static/` by name: no folders, no dot files, nothing outside it."""
    if ".." in name:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such file")
    return _file(STATIC_DIR / name)
