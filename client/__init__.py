"""The Python client of ragbus's HTTP API (`RagbusClient`): what the CLI, the benchmarks and
the evaluation harness talk to a running stack with.

It speaks HTTP and JSON only: it imports nothing of ours but `contracts` (and needs none of
it today), never `api`, so anything may use it without pulling in the server.
"""

from client.http import ApiError, RagbusClient, SSEMessage, parse_sse

__all__ = ["ApiError", "RagbusClient", "SSEMessage", "parse_sse"]
