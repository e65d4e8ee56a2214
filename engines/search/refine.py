"""The text channels' lists made better before fusion (`RAGBUS_FUSION=convex`): score
completion (`completion`: each text channel scores what only the other listed), then
pseudo-relevance feedback (`feedback`: the text channels search again with what their first
hits say, and are completed again). Either one that fails is logged, and the lists it would
have changed stand."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from contracts.commands import SearchCommand
from contracts.enums import Channel
from contracts.models import RetrievedChunk, listed
from engines.search import completion, feedback
from engines.search.channel_search import ranked
from infra.logging import get_logger
from infra.retrieval.lexical import SparseVec

if TYPE_CHECKING:
    from infra.runtime.resources import Resources

log = get_logger(__name__)

Rankings = dict[Channel, list[RetrievedChunk]]


async def completions(
    resources: Resources,
    cmd: SearchCommand,
    vector: str | None,
    rankings: Rankings,
    terms: SparseVec | None = None,
) -> Rankings:
    """Each text channel's completions of `rankings` (`engines.search.completion`); none
    when completion fails (logged): fusion goes on with the channels' own lists."""
    try:
        return await completion.complete(resources, cmd.query, vector, rankings, terms)
    except Exception:
        log.exception("score_completion_failed", request_id=cmd.request_id)
        return {}


async def refine(
    resources: Resources, cmd: SearchCommand, vector: str | None, rankings: Rankings
) -> Rankings:
    """The channels' lists of `rankings` (those that answered) as fusion should read them:
    completed (`RAGBUS_SCORE_COMPLETION`), then each followed by its feedback search's list
    and that list's completions (`RAGBUS_SEARCH_FEEDBACK`). `vector` is the query's packed
    embedding. A new dict: `rankings` is left as it was."""
    settings = resources.settings
    lists = dict(rankings)
    if settings.score_completion:
        added = await completions(resources, cmd, vector, dict(lists))
        for channel, chunks in added.items():
            lists[channel] = [*lists[channel], *chunks]
    if not settings.search_feedback:
        return lists
    started = time.perf_counter()
    try:
        again = await feedback.search_again(resources, cmd, vector, dict(lists))
    except Exception:
        log.exception("search_feedback_failed", request_id=cmd.request_id)
        return lists
    log.debug(
        "search_feedback",
        request_id=cmd.request_id,
        applied=again is not None,
        ms=round((time.perf_counter() - started) * 1000, 2),
    )
    if again is None:
        return lists
    found, moved_vector, terms = again
    # marked as they are ranked; their completions, copies of the other's, keep the mark
    fed = {
        channel: ranked(chunks[: cmd.top_k], channel, feedback=True)
        for channel, chunks in found.items()
    }
    added = (
        await completions(resources, cmd, moved_vector, fed, terms)
        if settings.score_completion
        else {}
    )
    for channel, chunks in fed.items():
        # the channel's own ranking stays what it reports; fusion reads the second list
        lists[channel] = [*listed(lists[channel]), *chunks, *added.get(channel, [])]
    return lists
