"""The answer a finished request gives: the draft with its citations resolved, and the metadata
that explains it (intent, weights, channels, attempts, confidence), or, when generation
failed, the best passages quoted and cited. Pure functions of the saga's state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from contracts.events import AnswerData
from contracts.limits import FUSED_OPENINGS, MAX_SNIPPET_CHARS
from contracts.models import Citation, RetrievedChunk, listed
from contracts.sessions import MEMORY_PREFIX
from contracts.tenancy import caller_namespace
from orchestrator.state import AttemptRecord, RequestState

FALLBACK_PASSAGES = FUSED_OPENINGS
"""The fused list's first passages, the ones that carry their openings on the bus."""
FALLBACK_CHARS = 320
FALLBACK_INTRO = "The answer could not be composed; the most relevant passages:"


def snippet(text: str) -> str:
    """A passage's start, cut at a word within `MAX_SNIPPET_CHARS`."""
    text = " ".join(text.split())
    if len(text) <= MAX_SNIPPET_CHARS:
        return text
    return text[: MAX_SNIPPET_CHARS - 1].rsplit(" ", 1)[0] + "…"


def cite(chunk: RetrievedChunk, tenant: str) -> Citation:
    """A fused chunk as the answer cites it: with its page and section where it has them,
    and, for a page of a parsed file, the namespace (as the caller names it) that its
    original file is fetched from."""
    return Citation(
        chunk_id=chunk.chunk_id,
        document_id=chunk.document_id,
        title=chunk.title,
        source=chunk.source,
        page=chunk.page,
        page_label=chunk.page_label,
        section=chunk.section,
        namespace=caller_namespace(tenant, chunk.namespace) if chunk.page is not None else "",
        score=chunk.score,
        snippet=snippet(chunk.text),
        channels=chunk.channels,
        kind="memory" if chunk.document_id.startswith(MEMORY_PREFIX) else "document",
    )


def build_answer(state: RequestState, finished: datetime, critic_note: str | None) -> AnswerData:
    by_id = {c.chunk_id: c for c in state.fused}
    citations = {
        n: cite(by_id[cid], state.tenant)
        for n, cid in sorted(state.draft_citations.items())
        if cid in by_id
    }
    last = state.attempts[-1] if state.attempts else None
    low_confidence = last is not None and last.verdict != "accept"
    metadata: dict[str, Any] = {
        "intent": state.intent.value if state.intent else None,
        "intent_confidence": state.intent_confidence,
        "intent_method": state.intent_method,
        "weights": {c.value: w for c, w in state.weights.items()},
        "effective_weights": {c.value: w for c, w in state.effective_weights.items()},
        "channels": {  # keyed by channel, so without it, and without what is unknown
            c.value: r.model_dump(mode="json", exclude={"channel"}, exclude_none=True)
            for c, r in state.channel_reports.items()
        },
        "attempts": state.attempt,
        "attempt_history": [
            _attempt(a, final=a is last, content=state.draft) for a in state.attempts
        ],
        "confidence": last.confidence if last else None,
        "low_confidence": low_confidence,
        "generator": state.generator,
        "tools": [t.model_dump(mode="json") for t in state.tool_results],
        "latency_ms": round((finished - state.created_at).total_seconds() * 1000, 2),
        "trace_id": state.trace.trace_id,
        "standalone_query": state.question,
        "rewrite_method": state.rewrite_method,
        "session_id": state.session_id,
    }
    if critic_note:
        metadata["critic_note"] = critic_note
    if low_confidence and last is not None:
        reasons = "; ".join(last.reasons) or "weak support"
        metadata["note"] = (
            f"Low confidence ({last.confidence:.2f}) after {state.attempt} attempt(s): "
            f"{reasons}. Check the cited sources before relying on this answer."
        )
    if state.mode == "retrieve":
        metadata["retrieval"] = rankings(state)
    return AnswerData(content=state.draft or "", citations=citations, metadata=metadata)


def _attempt(record: AttemptRecord, *, final: bool, content: str | None) -> dict[str, Any]:
    """An attempt as the answer event lists it: the final one without its draft when that
    draft is the event's `content` (the whole answer again, the event's largest field)."""
    if final and record.answer == (content or ""):
        return record.model_dump(mode="json", exclude={"answer"})
    return record.model_dump(mode="json")


def passages_draft(fused: list[RetrievedChunk]) -> tuple[str, dict[int, str]] | None:
    """The best passages' openings, numbered and cited; None when none has text."""
    shown = [c for c in fused if c.text.strip()][:FALLBACK_PASSAGES]
    if not shown:
        return None
    lines = [f"{opening(chunk.text)} [{n}]" for n, chunk in enumerate(shown, start=1)]
    draft = FALLBACK_INTRO + "\n\n" + "\n\n".join(lines)
    return draft, {n: c.chunk_id for n, c in enumerate(shown, start=1)}


def opening(text: str) -> str:
    """A passage's first sentences, up to `FALLBACK_CHARS`, cut at a word."""
    flat = " ".join(text.split())
    if len(flat) <= FALLBACK_CHARS:
        return flat
    cut = flat[:FALLBACK_CHARS]
    end = max(cut.rfind(". "), cut.rfind("? "), cut.rfind("! "))
    if end >= FALLBACK_CHARS // 3:
        return cut[: end + 1]
    return cut[: cut.rfind(" ")] + " …"


def rankings(state: RequestState) -> dict[str, object]:
    """Every channel's ranking and the fused one, for search clients and evaluation."""

    def ranked(chunks: list[RetrievedChunk]) -> list[dict[str, object]]:
        return [
            {"chunk_id": c.chunk_id, "document_id": c.document_id, "score": c.score} for c in chunks
        ]

    return {
        # each fused chunk also says which channels ranked it where (the bridge included)
        "fused": [
            {**item, "channels": c.channels}
            for item, c in zip(ranked(state.fused), state.fused, strict=True)
        ],
        # each channel's own ranking: its completions (scores for what another found) left out
        "channels": {
            c.value: ranked(listed(chunks)) for c, chunks in state.channel_results.items()
        },
    }
