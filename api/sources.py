"""`/v1/sources`: the tenant's sources kept in sync (`contracts.sources`), administered with
the tenant's own key. The API only records a source and asks for its syncs: each sync is run
by a sources worker on the bus, as an ingest job (`workers.sources`)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from api.auth import Caller, TenantKeyDep
from api.deps import BusDep, JetStreamDep, RedisDep, SettingsDep
from api.jobs import job_events_url, job_status_url
from api.schemas import ErrorResponse
from contracts.sources import (
    MAX_EVERY_S,
    MIN_EVERY_S,
    SOURCE_NAME_PATTERN,
    SourceRecord,
    SourceSpec,
    SyncReason,
    SyncRun,
)
from contracts.tenancy import store_namespace
from infra.logging import get_logger
from infra.runtime.bus import Bus
from infra.runtime.ingest_jobs import open_job
from infra.settings import Settings
from infra.sources.kinds import SourceRefused, allowed_folder
from infra.sources.network import HostRefused, check_url
from infra.sources.registry import SourceError, SourceRegistry
from infra.sources.schedule import request_sync
from infra.sources.state import SourceState, sources_bucket

log = get_logger(__name__)

router = APIRouter(
    prefix="/v1/sources",
    tags=["sources"],
    responses={code: {"model": ErrorResponse} for code in (400, 401, 403, 404, 409, 422, 429, 503)},
)

SourcePath = Annotated[str, Path(pattern=SOURCE_NAME_PATTERN, description="The source's name.")]


class SourceView(SourceSpec):
    """A source, and its last sync."""

    created_at: str
    removing: bool = False
    last_sync: SyncRun | None = Field(
        default=None, description="the last sync: its job, what it found, when it published"
    )


class SyncAccepted(BaseModel):
    source: str
    job_id: str = Field(description="the ingest job the sync runs as")
    status_url: str
    events_url: str


async def _view(record: SourceRecord, js: JetStreamDep, settings: Settings) -> SourceView:
    kv = await sources_bucket(js, settings)
    run = await SourceState(kv, record.tenant, record.name).run()
    fields = record.model_dump(
        include=set(SourceSpec.model_fields), exclude_none=True, exclude_defaults=False
    )
    return SourceView.model_validate(
        {
            **fields,
            "access": record.access,
            "created_at": record.created_at.isoformat(),
            "removing": record.removing,
            "last_sync": run,
        }
    )


async def _sync(
    bus: Bus, redis: RedisDep, settings: Settings, record: SourceRecord, reason: SyncReason
) -> SyncAccepted:
    try:
        job_id = await request_sync(bus, record, reason)
        await open_job(redis, job_id, settings.state_ttl_s, record.tenant)
    except Exception as exc:
        log.exception("source_sync_not_published", source=record.name)
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"the sync of {record.name!r} could not be queued; ask again",
        ) from exc
    return SyncAccepted(
        source=record.name,
        job_id=job_id,
        status_url=job_status_url(job_id),
        events_url=job_events_url(job_id),
    )


def _checked_location(body: SourceSpec, tenant: str, settings: Settings) -> str:
    """Where the source is, once it is known to be a place the tenant's sources may read (the
    sources workers check it again before each sync)."""
    private = settings.source_private_hosts or ()
    if body.kind == "folder":
        return str(allowed_folder(body.location, tenant, settings.source_roots or ()))
    if body.kind == "web":
        check_url(body.location, private)
    elif body.s3 is not None and body.s3.endpoint_url:
        check_url(body.s3.endpoint_url, private)
    return body.location


async def _found(redis: RedisDep, caller: Caller, name: str) -> SourceRecord:
    record = await SourceRegistry(redis).get(caller.tenant, name)
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no source {name!r}")
    return record


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SyncAccepted,
    summary="Declare a source; its first sync starts at once",
)
async def create_source(
    body: SourceSpec,
    caller: TenantKeyDep,
    redis: RedisDep,
    bus: BusDep,
    settings: SettingsDep,
) -> SyncAccepted:
    """A folder must lie under one of the operator's `RAGBUS_SOURCE_ROOTS` (in `tenants`
    mode under `<root>/<tenant>/`); `every_s` may be no shorter than
    `RAGBUS_SOURCE_MIN_EVERY_S`. A tenant keeps at most its `sources` limit of sources."""
    try:
        location = await asyncio.to_thread(_checked_location, body, caller.tenant, settings)
    except (SourceRefused, HostRefused) as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    if body.every_s is not None and body.every_s < settings.source_min_every_s:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"every_s is at least {settings.source_min_every_s:g} here "
            "(RAGBUS_SOURCE_MIN_EVERY_S); for changes as they happen, `watch` the folder",
        )
    record = SourceRecord(
        **body.model_dump(exclude={"location", "access"}),
        access=body.access,
        location=location,
        tenant=caller.tenant,
        store_namespace=store_namespace(caller.tenant, body.namespace),
    )
    try:
        await SourceRegistry(redis).create(record, caller.limits.sources)
    except SourceError as exc:
        code = status.HTTP_409_CONFLICT if "exists" in str(exc) else 429
        raise HTTPException(code, str(exc)) from exc
    log.info("source_created", tenant=caller.tenant, source=record.name, kind=record.kind)
    return await _sync(bus, redis, settings, record, "created")


@router.get("", response_model=list[SourceView], summary="The tenant's sources")
async def list_sources(
    caller: TenantKeyDep, redis: RedisDep, js: JetStreamDep, settings: SettingsDep
) -> list[SourceView]:
    records = await SourceRegistry(redis).every(caller.tenant)
    return [await _view(record, js, settings) for record in records]


@router.get("/{source}", response_model=SourceView, summary="A source, and its last sync")
async def get_source(
    source: SourcePath,
    caller: TenantKeyDep,
    redis: RedisDep,
    js: JetStreamDep,
    settings: SettingsDep,
) -> SourceView:
    return await _view(await _found(redis, caller, source), js, settings)


class SourceSchedule(BaseModel):
    """A source's schedule, changed: the fields sent replace the source's (`every_s: null`
    ends its schedule). What it reads and where its documents go are fixed: a source that
    should read otherwise is removed and declared again."""

    model_config = ConfigDict(extra="forbid")

    every_s: float | None = Field(default=None, ge=MIN_EVERY_S, le=MAX_EVERY_S)
    watch: bool | None = None


@router.patch(
    "/{source}",
    response_model=SourceView,
    summary="Change a source's schedule (`every_s`, `watch`); it holds from the next tick",
)
async def set_schedule(
    source: SourcePath,
    body: SourceSchedule,
    caller: TenantKeyDep,
    redis: RedisDep,
    js: JetStreamDep,
    settings: SettingsDep,
) -> SourceView:
    changes = {name: getattr(body, name) for name in body.model_fields_set}
    every = changes.get("every_s")
    if every is not None and every < settings.source_min_every_s:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"every_s is at least {settings.source_min_every_s:g} here (RAGBUS_SOURCE_MIN_EVERY_S)",
        )
    if changes.get("watch") is None:
        changes.pop("watch", None)
    record = await _found(redis, caller, source)
    if changes.get("watch") and record.kind != "folder":
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, "only a folder can be watched: give it every_s"
        )
    try:
        changed = await SourceRegistry(redis).update(caller.tenant, source, changes)
    except SourceError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    log.info("source_schedule_set", tenant=caller.tenant, source=source, **changes)
    return await _view(changed, js, settings)


@router.post(
    "/{source}/sync",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SyncAccepted,
    summary="Sync a source now (one running meanwhile syncs once more when it ends)",
)
async def sync_source(
    source: SourcePath, caller: TenantKeyDep, redis: RedisDep, bus: BusDep, settings: SettingsDep
) -> SyncAccepted:
    record = await _found(redis, caller, source)
    if record.removing:
        raise HTTPException(status.HTTP_409_CONFLICT, f"source {source!r} is being removed")
    return await _sync(bus, redis, settings, record, "requested")


@router.delete(
    "/{source}",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SyncAccepted | None,
    summary="Remove a source, and (unless kept) delete every document it indexed",
    responses={204: {"description": "removed; its documents kept"}},
)
async def remove_source(
    source: SourcePath,
    response: Response,
    caller: TenantKeyDep,
    redis: RedisDep,
    bus: BusDep,
    js: JetStreamDep,
    settings: SettingsDep,
    keep_documents: Annotated[
        bool,
        Query(description="keep its documents in the index, as if uploaded (they sync no more)"),
    ] = False,
) -> SyncAccepted | None:
    """Without `keep_documents`, the deletion is a job of the sources workers: its chunks,
    vectors, graph facts and originals go, then the source (it shows `removing` until then)."""
    registry = SourceRegistry(redis)
    if keep_documents:
        await _found(redis, caller, source)
        await registry.remove(caller.tenant, source)
        await SourceState(await sources_bucket(js, settings), caller.tenant, source).forget()
        log.info("source_removed", tenant=caller.tenant, source=source, documents="kept")
        response.status_code = status.HTTP_204_NO_CONTENT
        return None
    removing = await registry.mark_removing(caller.tenant, source)
    if removing is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no source {source!r}")
    log.info("source_removing", tenant=caller.tenant, source=source)
    return await _sync(bus, redis, settings, removing, "removed")
