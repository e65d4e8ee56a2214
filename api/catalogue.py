"""The `/v1` catalogue of what a caller keeps: its namespaces, and the documents of one.

Both read the tenant's ledger of documents (`infra.tenancy.quotas`): the one its limits count
is also its catalogue, so a listing shows what was accepted through this API, by id, not what
the stores hold. A namespace is shown by the caller's name for it
(`contracts.tenancy.caller_namespace`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from api.auth import CallerDep, authenticate
from api.deps import QuotasDep
from api.routes import V1_ERRORS
from api.schemas import DocumentEntry, DocumentList, NamespaceCount, Namespaces
from contracts.queries import MAX_CALLER_NAMESPACE_CHARS, NAMESPACE_PATTERN
from contracts.tenancy import caller_namespace, store_namespace

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)], responses=V1_ERRORS)

NamespaceQuery = Annotated[
    str, Query(pattern=NAMESPACE_PATTERN, max_length=MAX_CALLER_NAMESPACE_CHARS)
]
"""A caller's namespace as a query parameter; the document endpoints (`api.documents`) take
it too."""
MAX_LISTED = 1000
"""Documents `GET /v1/documents` lists at most."""


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
    summary="The documents the caller keeps in a namespace (accepted through this API), by id",
)
async def list_documents(
    caller: CallerDep,
    quotas: QuotasDep,
    namespace: NamespaceQuery = "default",
    limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = 200,
) -> DocumentList:
    space = store_namespace(caller.tenant, namespace)
    documents = await quotas.documents(caller.tenant, space, limit)
    return DocumentList(
        namespace=namespace,
        documents=[DocumentEntry(id=doc.document_id, bytes=doc.bytes) for doc in documents],
    )
