"""MCP tools' names as the registry and a model see them, and the operator's routes: a question
that matches a server's route plans a call to that server's tool with no model involved.

An MCP tool is offered as `<prefix>__<tool>` (`prefixed_name`), a name OpenAI's function
calling accepts (`^[A-Za-z0-9_-]{1,64}$`): characters outside that set become `_`; a name
still too long is no name (the tool worker skips that tool and says so).

`route_calls` is shared by the tool worker (which plans from a question that came without
calls, once the calculator found nothing in it) and the classify worker: pass it only the
servers the caller may use. A route's arguments are text taken from the question;
`coerce_arguments` turns those the tool's schema wants as numbers or booleans into them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from string import Formatter
from typing import Any, Final

from contracts.models import ToolCall
from infra.config.mcp import McpServer
from infra.tenancy.tool_access import EVERY_SERVER, ToolAccess, allows

SEPARATOR: Final = "__"
OPENAI_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_OUTSIDE: Final = re.compile(r"[^A-Za-z0-9_-]")
_SINGLE: Final = re.compile(r"^\{(\w+)\}$")
_INTEGER: Final = re.compile(r"^[+-]?\d+$")
_NUMBER: Final = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_BOOLEANS: Final = {"true": True, "yes": True, "false": False, "no": False}


def prefixed_name(prefix: str, tool: str) -> str | None:
    """The registered name of `tool` of the server with `prefix`, or None when none fits."""
    if not tool:
        return None
    name = f"{prefix}{SEPARATOR}{_OUTSIDE.sub('_', tool)}"
    return name if OPENAI_NAME.match(name) else None


def _fill(template: Any, groups: Mapping[str, str]) -> Any:
    """`template` with every `{group}` in its strings replaced; a string that is one
    placeholder alone becomes the group's text."""
    if isinstance(template, str):
        single = _SINGLE.match(template)
        if single is not None:
            return groups.get(single.group(1), "")
        return Formatter().vformat(template, (), _Groups(groups))
    if isinstance(template, dict):
        return {key: _fill(value, groups) for key, value in template.items()}
    if isinstance(template, list):
        return [_fill(item, groups) for item in template]
    return template


class _Groups(dict[str, str]):
    """A group that did not take part in the match fills in as empty text."""

    def __missing__(self, key: str) -> str:
        return ""


def _coerce(value: str, kind: Any) -> Any:
    text = value.strip()
    if kind == "integer" and _INTEGER.match(text):
        return int(text)
    if kind == "number" and _NUMBER.match(text):
        number = float(text)
        return int(number) if number.is_integer() and _INTEGER.match(text) else number
    if kind == "boolean" and text.lower() in _BOOLEANS:
        return _BOOLEANS[text.lower()]
    return value


def coerce_arguments(arguments: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Text arguments whose property the schema types as integer, number or boolean, as
    such (when they read as one); the rest unchanged."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return arguments
    coerced = dict(arguments)
    for key, value in arguments.items():
        spec = properties.get(key)
        if isinstance(value, str) and isinstance(spec, Mapping):
            kinds = spec.get("type")
            for kind in kinds if isinstance(kinds, list) else [kinds]:
                if (new := _coerce(value, kind)) is not value:
                    coerced[key] = new
                    break
    return coerced


def route_calls(
    query: str,
    servers: Mapping[str, McpServer],
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[ToolCall]:
    """The call the first route matching `query` plans (servers and their routes in the
    order configured), named with its server's prefix; empty when none matches.

    A route's `pattern` is searched case-insensitively; its arguments are its templates
    filled from the named groups, or the named groups that matched. With `schemas` (the
    tools' parameters by prefixed name), text becomes the numbers and booleans they ask for.
    """
    for name, server in servers.items():
        for route in server.routes:
            match = re.compile(route.pattern, re.IGNORECASE).search(query)
            if match is None:
                continue
            tool = prefixed_name(server.prefix_for(name), route.tool)
            if tool is None:
                continue
            groups = {k: v.strip() for k, v in match.groupdict().items() if v is not None}
            arguments = dict(groups) if route.arguments is None else _fill(route.arguments, groups)
            if schemas is not None and tool in schemas:
                arguments = coerce_arguments(arguments, schemas[tool])
            digest = hashlib.sha1(
                f"{tool}:{json.dumps(arguments, sort_keys=True, default=str)}".encode()
            ).hexdigest()[:10]
            try:
                return [ToolCall(id=f"route-{digest}", name=tool, arguments=arguments)]
            except ValueError:  # arguments past the bus's bound: no call
                continue
    return []


def routed_servers(
    servers: Mapping[str, McpServer], allowed: AbstractSet[str] | None
) -> dict[str, McpServer]:
    """The servers whose routes a caller who may use the servers `allowed` follows: those it
    may use that have routes (a `disabled` one is not configured at all:
    `Settings.mcp_server_configs`)."""
    return {
        name: server for name, server in servers.items() if server.routes and allows(allowed, name)
    }


class ToolRoutes:
    """The operator's routes as the classifying workers ask them: which tool, if any, a
    route of a server the tenant may use sends a question to (the classify worker, and the
    search worker when it classifies its question itself, RAGBUS_CLASSIFY_WITH_SEARCH)."""

    def __init__(self, servers: Mapping[str, McpServer], access: ToolAccess) -> None:
        self.servers = routed_servers(servers, EVERY_SERVER)
        self.access = access

    async def tool_for(self, tenant: str, question: str) -> str | None:
        if not self.servers:
            return None
        allowed = await self.access.servers_for(tenant)
        calls = route_calls(question, routed_servers(self.servers, allowed))
        return calls[0].name if calls else None
