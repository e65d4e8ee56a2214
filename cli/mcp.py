"""`ragbus mcp`: ragbus's MCP server on stdio, for desktop clients that start a command (Claude
Desktop, Cursor and the like): a bridge to the API's MCP endpoint (`cli.mcp_bridge`)."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import DEFAULT_API

HELP = (
    "Serve ragbus's MCP tools and documents over stdio, for an MCP client that starts a "
    "command (Claude Desktop, Cursor, an agent framework).\n\n"
    "A bridge: each call goes to the API's MCP endpoint, <api>/mcp (which a client that speaks "
    "streamable HTTP can use directly, with the key as a bearer token), with the key given "
    "here, so `ragbus up` (or `ragbus api`) must be running. Tools: ask, search, ingest, "
    "job_status, namespaces; resources: the documents, as "
    "ragbus://documents/{namespace}/{document_id}. stdout carries the protocol, logs go to "
    "stderr.\n\n"
    "\b\n"
    "In the client's configuration (claude_desktop_config.json, .cursor/mcp.json):\n"
    '  {"mcpServers": {"ragbus": {\n'
    '     "command": "/path/to/ragbus/.venv/bin/ragbus",\n'
    '     "args": ["mcp", "--api", "http://127.0.0.1:8000"],\n'
    '     "env": {"RAGBUS_API_TOKEN": "<the API token, or the tenant\'s key>"}}}}'
)


def register(app: typer.Typer) -> None:
    app.command("mcp", help=HELP)(mcp_command)


def mcp_command(
    api: Annotated[
        str,
        typer.Option(
            "--api",
            "--url",
            envvar="RAGBUS_API_URL",
            help="The API's base URL (or its MCP endpoint, <api>/mcp).",
        ),
    ] = DEFAULT_API,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            "--key",
            envvar=["RAGBUS_API_TOKEN", "RAGBUS_API_KEY"],
            help="The bearer key: RAGBUS_API_TOKEN in `token` mode, the tenant's API key in "
            "`tenants` mode; none in `none` mode.",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log each step.")] = False,
) -> None:
    import anyio

    from cli.mcp_bridge import endpoint, serve_stdio
    from infra.logging import configure_logging

    configure_logging("INFO" if verbose else "WARNING")  # JSON lines on stderr
    anyio.run(serve_stdio, endpoint(api), token or None)
