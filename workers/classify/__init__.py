"""Classify worker: the query's intent, its channel weights, and the query embedding."""

from workers.classify.router import create_router

__all__ = ["create_router"]
