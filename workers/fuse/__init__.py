"""Fusion worker: intent-weighted reciprocal rank fusion of the channels' rankings."""

from workers.fuse.router import create_router

__all__ = ["create_router"]
