"""Tool worker: validated, sandboxed tool calls (a safe calculator to begin with)."""

from workers.tool.router import create_router

__all__ = ["create_router"]
