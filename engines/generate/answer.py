"""The answer without a model: the tools' outcomes for a tool question, else extractive from
the contexts, or the sentence that says nothing was found. The generate worker answers with
it when no LLM is configured or the model fails; the same-work peer (`bench.same_work`) too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from contracts.commands import GenerateCommand
from contracts.enums import Intent
from engines.generate.extractive import Answer, extractive_answer, no_evidence_answer
from engines.generate.tools import tool_answer
from infra.retrieval.vectors.codec import unpack_query

if TYPE_CHECKING:
    from infra.runtime.resources import Resources


async def answer_for(cmd: GenerateCommand, resources: Resources) -> Answer:
    """Tool outcomes answer a tool question; otherwise the contexts do, or we say we found
    nothing."""
    if cmd.tool_results or (cmd.intent is Intent.TOOL and not cmd.contexts):
        return Answer(text=tool_answer(cmd.tool_results), citations={}, sentences=0)
    if not cmd.contexts:
        return no_evidence_answer(cmd.query)
    return await extractive_answer(
        cmd.query,
        cmd.contexts,
        resources.encoding(),
        follow_ups=cmd.follow_ups,
        query_vectors=query_vectors(cmd.query_vectors),
    )


def query_vectors(packed: Mapping[str, str]) -> dict[str, np.ndarray]:
    return {text: vector for text, p in packed.items() if (vector := unpack_query(p)) is not None}
