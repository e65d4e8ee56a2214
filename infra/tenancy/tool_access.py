"""Which of the operator's MCP servers a tenant's requests may use.

The operator names MCP servers in the tool worker's configuration (`RAGBUS_MCP_CONFIG`,
`RAGBUS_MCP_SERVERS`); their tools join the registry under the server's prefix. Who may use
them depends on the auth mode:
- `none` and `token`: one caller, the default tenant: every server.
- `tenants`: the default tenant (the operator's own) every server; any other tenant only those
  its record allows (`Tenant.mcp_servers`, set by `ragbus tenant tools NAME --allow a,b`),
  none until allowed. A revoked or unknown tenant none.

Two places ask, for the same answer: the generate worker, which offers a model only the tools
a request may use, and the tool worker, which refuses a call to any other (a model, or a
caller naming tools, may ask for a tool it was never offered). A tenant's record is read at
most once per `CACHE_S` per process: a change of its allowlist holds everywhere within
seconds.
"""

from __future__ import annotations

import time
from collections.abc import Set as AbstractSet
from typing import Final

import redis.asyncio as aioredis

from contracts.tenancy import DEFAULT_TENANT
from contracts.tools import CatalogTool
from infra.settings import Settings
from infra.tenancy.registry import TenantRegistry

CACHE_S: Final = 5.0

EVERY_SERVER: Final = None
"""`servers_for`'s answer for a caller who may use every server."""


def allows(allowed: AbstractSet[str] | None, server: str | None) -> bool:
    """Whether a caller who may use the servers `allowed` (`EVERY_SERVER`: all of them) may
    use a tool of `server` (None: a built-in or plugin tool, every caller's)."""
    return server is None or allowed is EVERY_SERVER or server in allowed


class ToolAccess:
    def __init__(self, redis: aioredis.Redis, settings: Settings, cache_s: float = CACHE_S):
        self.registry = TenantRegistry(redis)
        self.settings = settings
        self.cache_s = cache_s
        self._known: dict[str, tuple[float, frozenset[str]]] = {}

    async def servers_for(self, tenant: str) -> frozenset[str] | None:
        """The MCP servers whose tools `tenant`'s requests may use; `EVERY_SERVER` (None)
        when it may use them all."""
        if self.settings.auth != "tenants" or tenant == DEFAULT_TENANT:
            return EVERY_SERVER
        now = time.monotonic()
        known = self._known.get(tenant)
        if known is not None and now - known[0] < self.cache_s:
            return known[1]
        record = await self.registry.get(tenant)
        allowed = (
            frozenset(record.mcp_servers) if record is not None and record.active else frozenset()
        )
        self._known[tenant] = (now, allowed)
        return allowed

    async def usable(self, tenant: str, catalog: list[CatalogTool]) -> list[CatalogTool]:
        """The tools of `catalog` that `tenant` may use, in name order."""
        allowed = await self.servers_for(tenant)
        return sorted(
            (tool for tool in catalog if allows(allowed, tool.server)), key=lambda tool: tool.name
        )
