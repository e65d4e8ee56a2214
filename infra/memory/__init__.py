"""Conversation memory: a session's turns (`sessions`, Redis) and what a scope remembers
(`semantic`, vectors per scope plus an index in Redis)."""
