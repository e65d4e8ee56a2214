"""Which tools the generate worker offers a model for a request.

The tool workers run the tools (built-in, `ragbus.tools` plugins, the tools of the operator's
MCP servers) and publish what they run to Redis (`infra.runtime.tool_catalog`); this worker
reads that catalog, at most once per `CATALOG_CACHE_S`, and offers a request the tools its
tenant may use (`infra.tenancy.tool_access`: a server's tools only where the tenant is
allowed it). Until a tool worker has published (or when Redis cannot be read), the built-in
tools' specs are offered, as they always were: a model is never left without the calculator
because a catalog is late.
"""

from __future__ import annotations

import time
from typing import Final

import redis.asyncio as aioredis

from contracts.tools import BUILTIN_TOOLS, CatalogTool, ToolSpec
from infra.logging import get_logger
from infra.runtime.redis_client import UNAVAILABLE_ERRORS
from infra.runtime.tool_catalog import read_catalog
from infra.settings import Settings
from infra.tenancy.tool_access import ToolAccess

log = get_logger(__name__)

CATALOG_CACHE_S: Final = 5.0


class ToolOffer:
    def __init__(self, redis: aioredis.Redis, settings: Settings) -> None:
        self.redis = redis
        self.access = ToolAccess(redis, settings)
        self._catalog: list[CatalogTool] = []
        self._read_at = float("-inf")

    async def _current(self) -> list[CatalogTool]:
        now = time.monotonic()
        if now - self._read_at >= CATALOG_CACHE_S:
            try:
                self._catalog = await read_catalog(self.redis)
            except UNAVAILABLE_ERRORS as exc:
                log.warning("tool_catalog_unread", error=type(exc).__name__)
            self._read_at = now
        return self._catalog

    async def for_tenant(self, tenant: str) -> list[ToolSpec]:
        """The specs to offer `tenant`'s request, in name order."""
        catalog = await self._current()
        if not catalog:
            return list(BUILTIN_TOOLS)
        return [
            ToolSpec(name=tool.name, description=tool.description, parameters=tool.parameters)
            for tool in await self.access.usable(tenant, catalog)
        ]
