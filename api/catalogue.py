"""The `/v1` catalogue of what a caller keeps: its namespaces, and the documents of one.

Both read the tenant's ledger of documents (`infra.tenancy.quotas`): the one its limits count
is also its catalogue, so a listing shows what was accepted through this API, by id, not what
the stores hold. A namespace is shown by the caller's name for it
(`contracts.tenancy.caller_namespace`).
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.exceptions import RequestValidationError

from api.auth import CallerDep, authenticate
from api.deps import QuotasDep, RedisDep
from api.routes import V1_ERRORS
from api.schemas import DocumentEntry, DocumentList, NamespaceCount, Namespaces
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
    documents = await quotas.documents(caller.tenant, space, None if where else limit)
    metadata = await DocumentMetadata(redis).read(space, [doc.document_id for doc in documents])
    entries = [
        DocumentEntry(id=doc.document_id, bytes=doc.bytes, metadata=metadata.get(doc.document_id))
        for doc in documents
        if where is None or matches(where, metadata.get(doc.document_id) or {})
    ]
    return DocumentList(namespace=namespace, documents=entries[:limit])


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
