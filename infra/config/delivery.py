"""How the bus delivers work to the workers: redelivery after silence, retried publishes,
dead-lettering, how many messages a worker handles at once and a step's consumer hands out,
and when a step reports that it has started.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class DeliverySettings(BaseModel):
    """Consumers: one group of `infra.settings.Settings`."""

    ack_wait_s: float = Field(30.0, gt=0, description="Redelivery after a worker goes silent.")
    publish_retry_s: float = Field(
        20.0,
        gt=0,
        description="How long a publish keeps retrying a missing ack or a stream with no leader "
        "(a cluster elects a new one within seconds of losing a node); then it fails.",
    )
    max_deliver: int = Field(5, ge=1, description="Deliveries before a message is dead-lettered.")
    ingest_requeues: int = Field(
        2,
        ge=0,
        le=10,
        description="Times an ingest document whose every delivery died unacknowledged (its "
        "process killed or hung, never an error it raised) is published afresh before it is "
        "dead-lettered: under repeated kills a healthy document must not be lost.",
    )
    retry_delay_s: float = Field(1.0, ge=0, description="Nak delay for transient failures.")
    worker_concurrency: int = Field(4, ge=1, description="Messages one subscriber handles at once.")
    phase_start_after_ms: float = Field(
        100.0,
        ge=0,
        description="A step sends its in_progress event only once it has run this long (its "
        "completed or failed event carries its start either way); 0 = every step, at once.",
    )
    max_ack_pending: int = Field(
        256,
        ge=1,
        description="Messages a step's consumer hands out unacknowledged, across all its "
        "replicas; raise it with the replicas (a message held past ack_wait_s is redelivered).",
    )
