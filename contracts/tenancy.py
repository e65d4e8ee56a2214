"""Tenants: who owns a request, its events, its documents and its namespaces.

A tenant name is a subject token (`rag.events.<tenant>.<request_id>`) and a prefix of the
tenant's store namespaces, so it is short, lowercase and has no dots, wildcards or `_`.
One-user installs (`RAGBUS_AUTH_MODE=none|token`) run everything as `DEFAULT_TENANT`, whose
store namespaces are the names callers give.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import StringConstraints

TENANT_PATTERN: Final = r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$"
"""1-32 lowercase letters, digits and inner `-`: a NATS subject token, a user name, a prefix."""
DEFAULT_TENANT: Final = "default"
"""Everything of a one-user install belongs to it."""
RESERVED_TENANTS: Final = frozenset({DEFAULT_TENANT, "admin", "ragbus", "system", "sys"})
"""Names `ragbus tenant create` refuses: the default tenant's and the service accounts'."""
NAMESPACE_SEPARATOR: Final = "__"
"""Between a tenant and its namespace in a store namespace; tenant names cannot hold `_`."""

_TENANT_RE = re.compile(TENANT_PATTERN)

TenantName = Annotated[str, StringConstraints(pattern=TENANT_PATTERN)]


def is_valid_tenant(name: str) -> bool:
    return bool(_TENANT_RE.fullmatch(name))


def store_namespace(tenant: str, namespace: str) -> str:
    """The namespace the stores keep a tenant's `namespace` under. The default tenant's are
    the names themselves (so a one-user install's data is where it always was); another
    tenant's carry its name, so two tenants' `docs` are two collections."""
    if tenant == DEFAULT_TENANT:
        return namespace
    if not is_valid_tenant(tenant):
        raise ValueError(f"invalid tenant name: {tenant!r}")
    return f"{tenant}{NAMESPACE_SEPARATOR}{namespace}"


def tenant_of(stored: str) -> str:
    """The tenant a store namespace belongs to (`store_namespace` read backwards): the name
    before `__`, else the default tenant's (whose namespaces hold no `__`)."""
    tenant, separator, _ = stored.partition(NAMESPACE_SEPARATOR)
    return tenant if separator and is_valid_tenant(tenant) else DEFAULT_TENANT


def caller_namespace(tenant: str, stored: str) -> str:
    """`store_namespace` undone: the name the tenant knows a store namespace by."""
    if tenant == DEFAULT_TENANT:
        return stored
    prefix = f"{tenant}{NAMESPACE_SEPARATOR}"
    return stored.removeprefix(prefix)
