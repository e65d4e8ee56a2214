"""Generate worker: a cited, streamed answer from the fused contexts (extractive by default)."""

from workers.generate.router import create_router

__all__ = ["create_router"]
