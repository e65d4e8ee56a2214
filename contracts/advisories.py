"""JetStream's own advisories that ragbus acts on (their schema is nats-server's)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MaxDeliveriesAdvisory(BaseModel):
    """`io.nats.jetstream.advisory.v1.max_deliver`: `stream_seq` in `stream` was delivered
    `deliveries` times to `consumer` without an ack, and will not be delivered again."""

    model_config = ConfigDict(extra="ignore")

    type: str = Field(pattern=r"^io\.nats\.jetstream\.advisory\.v1\.max_deliver$")
    id: str = Field(min_length=1, max_length=128)
    stream: str = Field(min_length=1, max_length=256)
    consumer: str = Field(min_length=1, max_length=256)
    stream_seq: int = Field(ge=1)
    deliveries: int = Field(ge=0)
