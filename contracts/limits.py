"""Size bounds every message on the bus keeps: a message over one is invalid, so its worker
dead-letters it (reason `poison`) before doing any work, whatever nats-server's `max_payload`
let through. The bounds sit well above what ragbus itself sends (chunks of about 800
characters, top_k at most 200, a few follow-up queries)."""

from __future__ import annotations

from typing import Final

MAX_ID_CHARS: Final = 256
"""Chunk, document, command and tool-call ids."""
MAX_TITLE_CHARS: Final = 1_000
MAX_SOURCE_CHARS: Final = 2_000
MAX_NAMESPACE_CHARS: Final = 97
"""A store namespace: a tenant (32), `__` and the tenant's own name for it (63)."""
MAX_PAGE_LABEL_CHARS: Final = 32
"""How a person names a page of a file: "p. 3", "slide 2"."""
MAX_SNIPPET_CHARS: Final = 600
"""The start of a cited passage an answer carries."""
FUSED_OPENINGS: Final = 3
"""How many of a fused list's first passages carry their opening on the bus (the rest only
their claim): the answer quotes that many when generation fails, and the generator sends
the openings of the others it cites (`GenerateResult.openings`)."""
MAX_CHUNK_CHARS: Final = 32_000
"""One chunk's text (or a community summary's)."""
MAX_CHUNKS: Final = 400
"""Any list of chunks: a channel's ranking, the fused list, a step's contexts."""
MAX_SUB_QUERIES: Final = 8
MAX_ANSWER_CHARS: Final = 60_000
MAX_CITATIONS: Final = 200
MAX_TOOL_CALLS: Final = 16
MAX_TOOL_OUTPUT_CHARS: Final = 100_000
MAX_TOOL_ARGUMENTS_CHARS: Final = 50_000
"""A tool call's arguments, as JSON."""
MAX_MESSAGE_CHARS: Final = 4_000
"""Error messages, reasons, methods and other short free text."""
MAX_LIST_ITEMS: Final = 64
"""Short lists of short text: reasons, samples."""
