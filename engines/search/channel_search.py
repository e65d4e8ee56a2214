"""One channel's search as the search worker runs it: its function looked up by name on
`channels` at call time (so a test, or an operator's patch, can replace one channel without
rebuilding anything), given until the command's deadline, and its hits ranked and cut."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING

from contracts.commands import SearchCommand
from contracts.enums import Channel
from contracts.envelope import utcnow
from contracts.models import RetrievedChunk
from engines.search import channels
from engines.search.channels import Found

if TYPE_CHECKING:
    from infra.runtime.resources import Resources

    ChannelSearch = Callable[[Resources, SearchCommand], Awaitable[Found]]

CHANNEL_FUNCTIONS: dict[Channel, str] = {
    Channel.VECTOR: "search_vector",
    Channel.SPARSE: "search_sparse",
    Channel.GRAPH_LOCAL: "search_graph_local",
    Channel.GRAPH_GLOBAL: "search_graph_global",
}
"""The document channels and their functions on `channels` (the memory channel is the memory
engine's, `engines.memory`)."""


def ranked(
    chunks: list[RetrievedChunk], channel: Channel, *, feedback: bool = False
) -> list[RetrievedChunk]:
    """1-based ranks, recorded under the channel's name for fusion; references only (fusion
    hydrates the chunks it keeps), so a store that answered with text, or with the chunk's
    place in its document (page, section), does not ship it.
    `feedback` marks a feedback search's list (`RetrievedChunk.feedback`)."""
    return [
        chunk.model_copy(
            update={
                "rank": rank,
                "channels": {channel.value: rank},
                "text": "",
                "vectors": None,
                "page": None,
                "page_label": "",
                "section": "",
                "feedback": feedback,
            }
        )
        for rank, chunk in enumerate(chunks, start=1)
    ]


class ChannelTimedOut(Exception):
    """A channel had not answered by its command's deadline (`SearchCommand.deadline_at`):
    it is dropped, not retried (the saga would not wait for a second try)."""


async def within(search: Awaitable[Found], deadline_at: datetime | None) -> Found:
    """The channel's search, given until `deadline_at` (no limit without one)."""
    if deadline_at is None:
        return await search
    left = (deadline_at - utcnow()).total_seconds()
    try:
        async with asyncio.timeout(max(left, 0.0)):
            return await search
    except TimeoutError as exc:
        raise ChannelTimedOut(f"no answer by the search deadline ({max(left, 0.0):.3g}s)") from exc


async def search_channel(
    resources: Resources,
    cmd: SearchCommand,
    channel: Channel,
    deadline_at: datetime | None = None,
) -> Found:
    """`channel`'s hits for `cmd`, ranked (`ranked`) and cut to `cmd.top_k`; with the query's
    embedding when the channel had to make it. `ChannelTimedOut` past `deadline_at`."""
    search: ChannelSearch = getattr(channels, CHANNEL_FUNCTIONS[channel])
    found = await within(search(resources, cmd), deadline_at)
    return Found(ranked(found.chunks[: cmd.top_k], channel), found.query_vector)
