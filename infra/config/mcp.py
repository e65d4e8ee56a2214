"""The operator's MCP servers, whose tools the tool worker offers beside its own.

Servers are named in the shape Claude Desktop and Cursor users know, in a JSON or YAML file
(`RAGBUS_MCP_CONFIG`, a path; `.yaml`/`.yml` read as YAML, anything else as JSON) or inline as
JSON (`RAGBUS_MCP_SERVERS`), or both (a name in both is refused)::

    {"mcpServers": {
        "everything": {"command": "npx", "args": ["mcp-server-everything", "stdio"],
                       "routes": [{"pattern": "^echo (?P<message>.+)$", "tool": "echo"}]},
        "notes": {"url": "https://notes.example/mcp", "token": "…", "timeout_s": 5}
    }}

Inline, the outer `{"mcpServers": …}` may be left out: `{"everything": {…}}` means the same.
Other top-level keys of a file (a desktop client's own settings) are ignored.

A server runs as a program over stdio (`command`, `args`, `env`, `cwd`) or is reached over
streamable HTTP (`url`, `headers`, `token`: sent as `Authorization: Bearer <token>`), never
both. A stdio server runs in the tool worker's sandbox unless `trusted`. Its tools are
registered as `<prefix>__<tool>` (`prefix`: the server's name unless set), `tools` keeps only
the tools it names, and `routes` let a question plan a call without a model
(`infra.tool_routes`). `timeout_s` and `max_result_chars` override the global settings below
for this server. Server names: lower-case letters, digits and `-`, 32 at most.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from string import Formatter
from typing import Any, Final, Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from contracts.limits import MAX_TOOL_OUTPUT_CHARS

SERVER_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
PREFIX: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
MAX_RESULT_CHARS: Final = MAX_TOOL_OUTPUT_CHARS - 200
"""The cap on a result, leaving room for the note that says it was cut."""


class McpConfigError(ValueError):
    """The MCP configuration cannot be used; the message names the server and the field."""


def template_fields(value: Any) -> set[str]:
    """The `{name}` placeholders in a route's argument template (strings anywhere inside)."""
    if isinstance(value, str):
        return {field for _, field, _, _ in Formatter().parse(value) if field}
    if isinstance(value, dict):
        return set().union(*(template_fields(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(template_fields(item) for item in value))
    return set()


class McpRoute(BaseModel):
    """A question matching `pattern` (a regular expression, case-insensitive, searched
    anywhere) plans a call to `tool`: its arguments are `arguments` with each `{group}` filled
    from the match's named groups, or, without `arguments`, the named groups themselves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str = Field(min_length=1, max_length=1000)
    tool: str = Field(min_length=1, max_length=64)
    arguments: dict[str, Any] | None = None

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"pattern {pattern!r} is not a regular expression: {exc}") from None
        return pattern

    @model_validator(mode="after")
    def _placeholders_are_groups(self) -> Self:
        groups = set(re.compile(self.pattern).groupindex)
        try:
            missing = template_fields(self.arguments) - groups
        except ValueError as exc:  # an unbalanced brace
            raise ValueError(f"route to {self.tool!r}: bad argument template: {exc}") from None
        if missing:
            raise ValueError(
                f"route to {self.tool!r}: {', '.join(sorted(missing))} named in arguments but "
                f"not a named group of the pattern (write (?P<name>...))"
            )
        return self


class McpServer(BaseModel):
    """One server entry of `mcpServers`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["stdio", "http", "streamable-http", "streamableHttp"] | None = None
    command: str | None = Field(None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    token: str | None = Field(None, min_length=1)
    trusted: bool = False
    disabled: bool = False
    prefix: str | None = None
    tools: list[str] | None = None
    timeout_s: float | None = Field(None, gt=0, le=600)
    max_result_chars: int | None = Field(None, ge=100, le=MAX_RESULT_CHARS)
    routes: list[McpRoute] = Field(default_factory=list)

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, prefix: str | None) -> str | None:
        if prefix is not None and not PREFIX.match(prefix):
            raise ValueError(
                f"prefix {prefix!r}: letters, digits, '_' and '-', starting with a letter or "
                "digit, 32 at most"
            )
        return prefix

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not re.match(r"^https?://[^/\s]+", url):
            raise ValueError(f"url {url!r} is not an http:// or https:// URL")
        return url

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either `command` (a stdio server) or `url` (streamable HTTP)")
        if self.command is not None:
            given = [name for name in ("headers", "token") if getattr(self, name)]
            if given or self.type not in (None, "stdio"):
                raise ValueError(
                    f"{', '.join(given) or 'type ' + repr(self.type)} belongs to an HTTP "
                    "server, not a stdio one (`command`)"
                )
        else:
            given = [name for name in ("args", "env", "cwd") if getattr(self, name)]
            if given or self.type == "stdio":
                raise ValueError(
                    f"{', '.join(given) or 'type stdio'} belongs to a stdio server "
                    "(`command`), not an HTTP one (`url`)"
                )
            if self.trusted:
                raise ValueError("`trusted` is for stdio servers (an HTTP server runs elsewhere)")
        return self

    @property
    def stdio(self) -> bool:
        return self.command is not None

    def prefix_for(self, name: str) -> str:
        return self.prefix or name

    def http_headers(self) -> dict[str, str]:
        """The headers every request carries: `headers`, and `token` as a bearer token."""
        headers = dict(self.headers)
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


def parse_servers(document: Any, source: str) -> dict[str, McpServer]:
    """`{"mcpServers": {name: entry}}` (or, inline, the inner mapping) as validated servers;
    `McpConfigError` naming `source`, the server and what is wrong."""
    if not isinstance(document, dict):
        raise McpConfigError(f"{source}: expected an object with `mcpServers`")
    servers = document.get("mcpServers", document if source.startswith("RAGBUS_") else None)
    if servers is None:
        raise McpConfigError(f"{source}: no `mcpServers` object")
    if not isinstance(servers, dict):
        raise McpConfigError(f"{source}: `mcpServers` must map server names to entries")
    found: dict[str, McpServer] = {}
    for name, entry in servers.items():
        if not isinstance(name, str) or not SERVER_NAME.match(name):
            raise McpConfigError(
                f"{source}: server name {name!r}: lower-case letters, digits and '-', starting "
                "with a letter or digit, 32 at most"
            )
        try:
            found[name] = McpServer.model_validate(entry)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'entry'}: "
                + error["msg"].removeprefix("Value error, ")
                for error in exc.errors()
            )
            raise McpConfigError(f"{source}: server {name!r}: {problems}") from None
    check_prefixes(found)
    return found


def check_prefixes(servers: dict[str, McpServer]) -> None:
    """Two servers whose tools would share names are refused."""
    prefixes: dict[str, str] = {}
    for name, server in servers.items():
        prefix = server.prefix_for(name)
        if prefix in prefixes:
            raise McpConfigError(
                f"MCP servers {prefixes[prefix]!r} and {name!r} share the prefix {prefix!r}"
            )
        prefixes[prefix] = name


def read_config_file(path: Path) -> dict[str, McpServer]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise McpConfigError(f"RAGBUS_MCP_CONFIG: cannot read {path}: {exc.strerror}") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            document = yaml.safe_load(text)
        else:
            document = json.loads(text)
    except (yaml.YAMLError, ValueError) as exc:
        raise McpConfigError(f"RAGBUS_MCP_CONFIG: {path} is not valid: {exc}") from None
    return parse_servers(document, str(path))


def parse_inline(text: str) -> dict[str, McpServer]:
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise McpConfigError(f"RAGBUS_MCP_SERVERS is not JSON: {exc}") from None
    return parse_servers(document, "RAGBUS_MCP_SERVERS")


class McpSettings(BaseModel):
    """The MCP servers and their calls: one group of `infra.settings.Settings`."""

    mcp_config: Path | None = Field(
        None,
        description='A JSON or YAML file naming MCP servers as `{"mcpServers": {...}}`.',
    )
    mcp_servers: str | None = Field(
        None, description="MCP servers inline, as JSON, in the same shape."
    )
    mcp_call_timeout_s: float = Field(
        20.0, gt=0, le=600, description="An MCP tool call's limit, unless its server sets one."
    )
    mcp_max_result_chars: int = Field(
        16_000,
        ge=100,
        le=MAX_RESULT_CHARS,
        description="An MCP tool's result is cut at this many characters.",
    )
    mcp_connect_timeout_s: float = Field(
        10.0, gt=0, description="Connecting to an MCP server and listing its tools."
    )
    mcp_reconnect_max_s: float = Field(
        30.0, ge=1, description="The longest wait between two attempts to reconnect a server."
    )
    mcp_sandbox_memory_mb: int = Field(
        1024, ge=64, description="A sandboxed stdio MCP server's data limit (RLIMIT_DATA)."
    )

    @field_validator("mcp_servers")
    @classmethod
    def _inline_servers_valid(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            parse_inline(value)  # refused at start-up, with the server and field named
        return value or None

    def mcp_server_configs(self) -> dict[str, McpServer]:
        """Every configured server that is not `disabled`, by name: the file's, then the
        inline ones. `McpConfigError` when the file cannot be read or either is invalid."""
        servers: dict[str, McpServer] = {}
        if self.mcp_config is not None:
            servers.update(read_config_file(self.mcp_config))
        if self.mcp_servers:
            for name, server in parse_inline(self.mcp_servers).items():
                if name in servers:
                    raise McpConfigError(
                        f"MCP server {name!r} is named in both RAGBUS_MCP_CONFIG and "
                        "RAGBUS_MCP_SERVERS"
                    )
                servers[name] = server
        check_prefixes(servers)
        return {name: server for name, server in servers.items() if not server.disabled}
