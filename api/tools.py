"""`GET /v1/tools`: the tools the caller's requests may use.

What the tool workers run and publish (`infra.runtime.tool_catalog`): the built-in tools,
`ragbus.tools` plugins, and the tools of the operator's MCP servers, each under its server's
prefix; in `tenants` mode a server's tools only where the tenant is allowed it
(`infra.tenancy.tool_access`). A model is offered exactly these (the generate worker reads the
same catalog through the same check), and a caller may name them in a question's tool round.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from api.auth import CallerDep, authenticate
from api.deps import RedisDep, SettingsDep
from api.routes import V1_ERRORS
from infra.runtime.tool_catalog import read_catalog
from infra.tenancy.tool_access import ToolAccess

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)], responses=V1_ERRORS)


class ToolView(BaseModel):
    name: str = Field(description="What a model calls it: `<server prefix>__<tool>` for MCP's.")
    description: str
    server: str | None = Field(description="The MCP server it comes from; null: built in.")
    parameters: dict[str, Any] = Field(description="The JSON Schema of its arguments.")


class ToolList(BaseModel):
    tools: list[ToolView] = Field(
        description="In name order; empty until a tool worker has published what it runs."
    )


@router.get("/tools", response_model=ToolList, summary="The tools the caller's requests may use")
async def list_tools(caller: CallerDep, redis: RedisDep, settings: SettingsDep) -> ToolList:
    usable = await ToolAccess(redis, settings).usable(caller.tenant, await read_catalog(redis))
    return ToolList(
        tools=[
            ToolView(
                name=tool.name,
                description=tool.description,
                server=tool.server,
                parameters=tool.parameters,
            )
            for tool in usable
        ]
    )
