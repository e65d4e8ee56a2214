"""Generation's settings: the OpenAI-compatible LLM endpoint (unset = extractive answers), its
retries and sampling, what else the LLM writes (entities, community summaries), and the
limits of the Python tool's sandbox.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class GenerationSettings(BaseModel):
    """Generation (LLM) and tools: one group of `infra.settings.Settings`."""

    llm_base_url: str | None = Field(
        None,
        description="OpenAI-compatible endpoint (e.g. `http://127.0.0.1:8001/v1`); "
        "unset = extractive generation.",
    )
    llm_model: str = Field("gpt-4o-mini", description="Model name sent to the LLM endpoint.")
    llm_api_key: str | None = Field(None, description="API key for the LLM endpoint.")
    llm_timeout_s: float = Field(
        30.0, gt=0, description="LLM connect / first-byte / between-chunk timeout."
    )
    llm_max_retries: int = Field(
        2, ge=0, le=10, description="LLM retries on transient errors, before the first token."
    )
    llm_retry_backoff_s: float = Field(
        0.5, ge=0, description="LLM retry back-off base (exponential)."
    )
    llm_temperature: float = Field(0.1, ge=0, le=2, description="LLM sampling temperature.")
    llm_max_tokens: int = Field(1024, ge=16, description="LLM answer length limit in tokens.")
    llm_entities: bool = Field(
        True, description="Use the LLM for entity extraction when RAGBUS_LLM_BASE_URL is set."
    )
    llm_summaries: bool = Field(
        True,
        description="Let the LLM write community summaries when RAGBUS_LLM_BASE_URL is set.",
    )
    sandbox_timeout_s: float = Field(
        10.0, gt=0, description="Python tool: wall-clock limit (the process group is killed)."
    )
    sandbox_cpu_s: int = Field(5, ge=1, description="Python tool: CPU-seconds limit.")
    sandbox_memory_mb: int = Field(
        256, ge=32, description="Python tool: address-space limit (RLIMIT_AS)."
    )
    sandbox_max_procs: int = Field(
        16, ge=1, description="Python tool: process limit (RLIMIT_NPROC)."
    )
    sandbox_isolation: str = Field(
        "auto",
        description="Python tool isolation: `auto` (bwrap, else `unshare -rn`, else the tool "
        "refuses), `bwrap`, `unshare` or `none`.",
    )
