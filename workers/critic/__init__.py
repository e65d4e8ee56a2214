"""Critic worker: scores an answer's grounding and decides accept or retry (and how)."""

from workers.critic.router import create_router

__all__ = ["create_router"]
