"""An MCP server written with the SDK's `MCPServer` for the tool worker's client tests: notes,
and tools that show what the sandbox allows and what a call's limits do.

    python notes_server.py                      # stdio
    python notes_server.py http PORT [TOKEN]    # streamable HTTP on 127.0.0.1:PORT/mcp,
                                                # every request must carry `Bearer TOKEN`

Standalone: it imports the SDK and the standard library only, so it runs in the sandbox with
the virtualenv's packages on its PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("notes")
NOTES: dict[str, str] = {}


@server.tool()
def add_note(title: str, text: str) -> str:
    """Keep a note under a title."""
    NOTES[title] = text
    return f"noted {title!r}"


@server.tool()
def get_note(title: str) -> str:
    """The text of the note with this title."""
    if title not in NOTES:
        raise ToolError(f"no note titled {title!r}")
    return NOTES[title]


@server.tool()
def add(a: int, b: int) -> dict[str, int]:
    """Add two integers (a structured result)."""
    return {"sum": a + b}


@server.tool()
def read_file(path: str) -> str:
    """The text of a file."""
    with open(path, encoding="utf-8", errors="replace") as file:
        return file.read()


@server.tool()
def write_file(path: str, text: str) -> str:
    """Write a file."""
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)
    return f"wrote {len(text)} characters to {path}"


@server.tool()
def open_socket(host: str, port: int) -> str:
    """Connect to host:port over TCP."""
    with socket.create_connection((host, port), timeout=3):
        return f"connected to {host}:{port}"


@server.tool()
def whoami() -> str:
    """The process id, user id, working directory and HOME the server runs with."""
    return f"pid={os.getpid()} uid={os.getuid()} cwd={os.getcwd()} home={os.environ.get('HOME')}"


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return f"slept {seconds} s"


@server.tool()
def big(n: int) -> str:
    """n characters of text."""
    return "x" * n


@server.tool()
def crash() -> str:
    """The server exits at once."""
    os._exit(3)


def extra_tool(word: str) -> str:
    """A tool that appears once `grow` ran."""
    return word.upper()


@server.tool()
async def grow(ctx: Context[Any, Any]) -> str:
    """Add the tool `extra` and tell the client its tools changed."""
    server.add_tool(extra_tool, name="extra")
    with contextlib.suppress(Exception):
        await ctx.notify_tools_changed()  # 2026-07-28 clients: subscriptions/listen
    with contextlib.suppress(Exception):
        await ctx.session.send_tool_list_changed()  # earlier ones: a notification
    return "grown"


def _serve_http(port: int, token: str | None) -> None:
    import uvicorn

    app = server.streamable_http_app()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and token is not None:
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"text/plain")],
                    }
                )
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        _serve_http(int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
    else:
        server.run()
