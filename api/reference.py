"""The API reference: `GET /openapi.json`, and Swagger UI at `/docs`, all served from here.

Swagger UI's files come from an installed package (`fastapi-offline`, pinned in
pyproject.toml), never from a CDN, so the page works without internet; the page and its
initializer are ours (`api/swagger/`), since the page's strict Content-Security-Policy (the
web page's, `api.web`) refuses inline script. FastAPI's own `/docs`, `/redoc` and
`/openapi.json` are off (`api.app`): they load their assets from a CDN and take no auth.

In `tenants` mode the interactive reference is off (`/docs` and its files answer 404: a browser
cannot send a bearer key when it opens a page), and `/openapi.json` answers an operator key
alone (`api.auth.require_reference_key`); `ragbus openapi` writes the same schema offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import fastapi_offline
from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, JSONResponse

from api.auth import require_reference_key
from api.deps import SettingsDep
from api.web import MEDIA_TYPES, SECURITY_HEADERS
from infra.settings import Settings

PAGE_DIR = Path(__file__).resolve().parent / "swagger"
"""Our page (`index.html`) and Swagger UI's initializer (`init.js`)."""
SWAGGER_UI_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"
"""Swagger UI's own files, as the package installs them."""

FILES: dict[str, Path] = {
    "init.js": PAGE_DIR / "init.js",
    "swagger-ui-bundle.js": SWAGGER_UI_DIR / "swagger-ui-bundle.js",
    "swagger-ui.css": SWAGGER_UI_DIR / "swagger-ui.css",
    "favicon.png": SWAGGER_UI_DIR / "favicon.png",
}
"""Every file `/docs/{name}` serves: these and nothing else."""

router = APIRouter(include_in_schema=False)


def _reference_on(settings: Settings) -> None:
    if settings.auth == "tenants":
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            "the interactive API reference is off in tenants mode; GET /openapi.json with the "
            "operator key, or run `ragbus openapi`",
        )


def _file(path: Path) -> FileResponse:
    return FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers=SECURITY_HEADERS)


@router.get("/openapi.json", dependencies=[Depends(require_reference_key)])
async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.api_route("/docs", methods=["GET", "HEAD"])
async def docs(settings: SettingsDep) -> FileResponse:
    _reference_on(settings)
    return _file(PAGE_DIR / "index.html")


@router.api_route("/docs/{name}", methods=["GET", "HEAD"])
async def docs_file(
    name: Annotated[str, PathParam(max_length=100)], settings: SettingsDep
) -> FileResponse:
    _reference_on(settings)
    path = FILES.get(name)
    if path is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such file")
    return _file(path)
