"""How a request runs: its attempts and tool rounds, its whole deadline and each step's, how
long its state and events are kept, the conversation it continues and the memory it recalls,
and a research request's breadth, depth and deadlines. The step deadlines are checked against
the request's here, at start-up, since a step that outlasts its request can never degrade.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, Field, model_validator

STEP_TIMEOUTS = (
    "classify_timeout_s",
    "search_timeout_s",
    "fuse_timeout_s",
    "generate_timeout_s",
    "critic_timeout_s",
    "tool_timeout_s",
)
"""The step deadlines (`Settings` fields) that must each be shorter than the request's."""


class SagaSettings(BaseModel):
    """The saga, conversations and memory, research mode: one group of
    `infra.settings.Settings`."""

    max_attempts: int = Field(2, ge=1, le=10, description="Critic rounds per request at most.")
    max_tool_calls: int = Field(3, ge=0, le=20, description="Tool rounds per request at most.")
    request_timeout_s: float = Field(120.0, gt=0, description="Whole-request deadline.")
    classify_timeout_s: float = Field(10.0, gt=0, description="Classification step deadline.")
    search_timeout_s: float = Field(10.0, gt=0, description="Search fan-in deadline.")
    fuse_timeout_s: float = Field(10.0, gt=0, description="Fusion step deadline.")
    generate_timeout_s: float = Field(60.0, gt=0, description="Generation step deadline.")
    critic_timeout_s: float = Field(10.0, gt=0, description="Critic step deadline.")
    critique_with_generation: bool = Field(
        True,
        description="The generating worker critiques its own final answer (the critic's "
        "scoring, phase event and verdict, within RAGBUS_CRITIC_TIMEOUT_S) and reports both in "
        "one result: one hop fewer a request, whenever both deadlines fit in what is left of "
        "the request's. False: the critic is a step of its own, for deployments that run it "
        "in other processes.",
    )
    tool_timeout_s: float = Field(30.0, gt=0, description="Tool step deadline.")
    deadline_poll_s: float = Field(0.2, gt=0, description="How often the deadline timer looks.")
    state_ttl_s: int = Field(86_400, gt=0, description="How long finished request state is kept.")
    events_max_age_s: int = Field(3_600, gt=0, description="How long caller events are replayable.")
    sweep_interval_s: float = Field(
        300.0, gt=0, description="How often the orchestrator sweeps orphaned work-queue messages."
    )
    idempotency_ttl_s: int = Field(
        86_400, gt=0, description="How long an Idempotency-Key is remembered."
    )

    # Conversations and memory
    session_max_turns: int = Field(
        50, ge=1, le=1000, description="Turns a session keeps; the oldest go first."
    )
    session_ttl_s: int = Field(
        7 * 86_400,
        gt=0,
        description="How long a turn is kept, and a session after its latest turn.",
    )
    session_context_turns: int = Field(
        3, ge=0, le=20, description="Earlier turns a follow-up is made standalone from."
    )
    memory_scope: Literal["session", "tenant"] = Field(
        "session",
        description="What semantic memory is shared by: one session (the default), or every "
        "session of a tenant. A memory is never recalled outside its scope.",
    )
    memory_ttl_s: int = Field(
        30 * 86_400, gt=0, description="How long a scope's memory index lives after its last write."
    )
    memory_min_score: float = Field(
        0.35,
        ge=-1.0,
        le=1.0,
        description="Cosine similarity below which a memory is not recalled for a question.",
    )

    # Research mode
    research_max_children: int = Field(
        4,
        ge=1,
        le=8,
        description="Sub-questions a research request answers at most (its breadth); each is a "
        "child request.",
    )
    research_max_depth: int = Field(
        1,
        ge=1,
        le=3,
        description="Levels of research: 1 = children are ordinary requests; 2 = a child whose "
        "sub-question has parts of its own is researched in turn (its children ordinary).",
    )
    research_timeout_s: float = Field(
        300.0, gt=0, description="Whole-request deadline of a research request."
    )
    research_wait_s: float = Field(
        180.0,
        gt=0,
        description="How long a research request waits for its children; those still running "
        "then are cancelled and reported, and the report is written without them.",
    )
    plan_timeout_s: float = Field(15.0, gt=0, description="Research planning step deadline.")

    @model_validator(mode="after")
    def _steps_end_before_the_request(self) -> Self:
        """A step whose deadline outlasts the request's can never degrade: the request times
        out first, whatever the step's fallback. Refused at start-up, by name."""
        too_long = [
            f"RAGBUS_{name.upper()}={getattr(self, name):g}"
            for name in STEP_TIMEOUTS
            if getattr(self, name) >= self.request_timeout_s
        ]
        if too_long:
            raise ValueError(
                f"step deadlines must be shorter than RAGBUS_REQUEST_TIMEOUT_S="
                f"{self.request_timeout_s:g}: {', '.join(too_long)}"
            )
        if self.research_wait_s >= self.research_timeout_s:
            raise ValueError(
                f"RAGBUS_RESEARCH_WAIT_S={self.research_wait_s:g} must be shorter than "
                f"RAGBUS_RESEARCH_TIMEOUT_S={self.research_timeout_s:g}: the report is written "
                "after the wait"
            )
        return self
