"""The `/v1` catalogue of what a caller keeps: its namespaces, and the documents of one.

Both read the tenant's ledger of documents (`infra.tenancy.quotas`): the one its limits count
is also its catalogue, so a listing shows what was accepted through this API, by id, not what
the stores hold. A namespace is shown by the caller's name for it
(`contracts.tenancy.caller_namespace`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import redis.asyncio as aioredis
from fastapi import APIRouter, Depends, HTTPException, Query, status
from fastapi.exceptions import RequestValidationError

from api.auth import Caller, CallerDep, authenticate
from api.deps import QuotasDep, RedisDep
from api.routes import V1_ERRORS
from api.schemas import DocumentEntry, DocumentList, NamespaceCount, Namespaces
from contracts.access import DocumentAccess, may_read, without_access
from contracts.filters import FilterError, Node, matches, parse_filter
from contracts.queries import MAX_CALLER_NAMESPACE_CHARS, NAMESPACE_PATTERN
from contracts.tenancy import caller_namespace, store_namespace
from infra.tenancy.catalogue import DocumentMetadata

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)], responses=V1_ERRORS)

NamespaceQuery = Annotated[
    str, Query(pattern=NAMESPACE_PATTERN, max_length=MAX_CALLER_NAMESPACE_CHARS)
]
"""A caller's namespace as a query parameter; the document endpoints (`api.documents`) take
it too."""
MAX_LISTED = 1000
"""Documents `GET /v1/documents` lists at most."""
MAX_FILTER_QUERY_CHARS = 2000
"""A `filter` query parameter's characters at most: percent-encoded, at worst 24 kB of URL,
which every client and uvicorn carry (a longer URL is refused before the API sees it)."""


@router.get(
    "/namespaces",
    response_model=Namespaces,
    summary="The caller's namespaces and how many documents each keeps",
)
async def list_namespaces(caller: CallerDep, quotas: QuotasDep) -> Namespaces:
    spaces = await quotas.namespaces(caller.tenant)
    return Namespaces(
        namespaces=[
            NamespaceCount(namespace=caller_namespace(caller.tenant, space), documents=count)
            for space, count in sorted(spaces.items())
        ]
    )


@router.get(
    "/documents",
    response_model=DocumentList,
    summary="The documents the caller keeps in a namespace (accepted through this API), by id, "
    "with their metadata; `filter` keeps those whose metadata passes it",
)
async def list_documents(
    caller: CallerDep,
    quotas: QuotasDep,
    redis: RedisDep,
    namespace: NamespaceQuery = "default",
    limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = 200,
    filter: Annotated[
        str | None,
        Query(
            max_length=MAX_FILTER_QUERY_CHARS,
            description="A metadata filter as JSON, as `POST /v1/queries` takes it "
            '(`{"file.type": "pdf"}`): only the documents whose metadata passes it.',
        ),
    ] = None,
) -> DocumentList:
    where = _filter(filter)
    space = store_namespace(caller.tenant, namespace)
    narrowed = where is not None or caller.user is not None
    documents = await quotas.documents(caller.tenant, space, None if narrowed else limit)
    metadata = await DocumentMetadata(redis).read(space, [doc.document_id for doc in documents])
    entries = [
        _entry(doc.document_id, doc.bytes, metadata.get(doc.document_id))
        for doc in documents
        if _listed(caller, where, metadata.get(doc.document_id))
    ]
    return DocumentList(namespace=namespace, documents=entries[:limit])


def _listed(caller: Caller, where: Node | None, metadata: dict[str, Any] | None) -> bool:
    """A user lists only the documents it may read, once indexed (before, their readers are
    not known here); the tenant's key lists every one."""
    if caller.user is not None and (metadata is None or not may_read(caller.reader, metadata)):
        return False
    return where is None or matches(where, metadata or {})  # as the channels match it


def _entry(document_id: str, size: int, metadata: dict[str, Any] | None) -> DocumentEntry:
    return DocumentEntry(
        id=document_id,
        bytes=size,
        metadata=without_access(metadata) if metadata is not None else None,
        access=DocumentAccess.of(metadata) if metadata is not None else None,
    )


async def readable_ids(
    redis: aioredis.Redis, caller: Caller, space: str, document_ids: list[str]
) -> set[str]:
    """Those of `document_ids` the caller may read (`_listed`'s rule, without a filter)."""
    if caller.user is None:
        return set(document_ids)
    found = await DocumentMetadata(redis).read(space, document_ids)
    return {d for d in document_ids if _listed(caller, None, found.get(d))}


async def require_readable(
    redis: aioredis.Redis, caller: Caller, space: str, document_id: str, namespace: str
) -> None:
    """404 for a user's download or deletion of a document it may not read, as for one that
    does not exist (nor one not yet indexed: its readers are not known yet); the tenant's key
    passes."""
    if caller.user is None:
        return
    metadata = (await DocumentMetadata(redis).read(space, [document_id])).get(document_id)
    if metadata is None or not may_read(caller.reader, metadata):
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"no document {document_id!r} of yours in namespace {namespace!r}",
        )


async def refuse_unreadable(
    redis: aioredis.Redis, caller: Caller, space: str, document_ids: list[str]
) -> None:
    """A user may not send a new version of a document it may not read (nor so learn its
    readers): 403 naming the first such id. A new id, or one the user may read, passes."""
    if caller.user is None or not document_ids:
        return
    found = await DocumentMetadata(redis).read(space, document_ids)
    for document_id in document_ids:
        metadata = found.get(document_id)
        if metadata is not None and not may_read(caller.reader, metadata):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"document id {document_id!r} is taken by a document you may not read: "
                "choose another id",
            )


def _filter(raw: str | None) -> Node | None:
    """The `filter` parameter's tree, or a 422 saying what is wrong with it."""
    if raw is None:
        return None
    try:
        return parse_filter(json.loads(raw))
    except json.JSONDecodeError as exc:
        raise RequestValidationError(
            [{"loc": ("query", "filter"), "msg": f"not JSON: {exc}", "type": "value_error"}]
        ) from None
    except FilterError as exc:
        raise RequestValidationError(
            [{"loc": ("query", "filter"), "msg": str(exc), "type": "value_error"}]
        ) from None
