"""The critic engine: an answer's scores (`scoring`), its verdict (`verdict`) and, for a
decomposition, the follow-up queries (`decompose`, `llm_decompose`), as one judgement
(`judge`); and a research question's plan (`plan`). The critic worker runs it, and the
generate worker on its own answer."""
