"""Sources kept in sync (`infra.sources`, `workers.sources`): where a folder source may be,
how often a source may be synced, and how many sources a tenant may keep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import NoDecode

from contracts.sources import MAX_EVERY_S, MIN_EVERY_S


class SourceSettings(BaseModel):
    """Sources: one group of `infra.settings.Settings`."""

    source_roots: Annotated[list[Path] | None, NoDecode] = Field(
        None,
        description="Folders under which a folder source may be (comma-separated, or a JSON "
        "list); none: folder sources are refused. In `tenants` mode a tenant's folders must be "
        "under `<root>/<tenant>/`. Links out of a source's folder are never followed.",
    )
    source_private_hosts: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description="Hosts (`name` or `name:port`) that web and S3 sources may reach although "
        "they resolve to private, loopback or link-local addresses (an intranet wiki, a local "
        "S3 server), comma-separated; unset: public hosts only.",
    )
    source_min_every_s: float = Field(
        60.0,
        ge=MIN_EVERY_S,
        le=MAX_EVERY_S,
        description="The shortest schedule (`every_s`) a source may ask for.",
    )
    source_watch_debounce_s: float = Field(
        0.2,
        ge=0.0,
        le=60.0,
        description="A watched folder's changes are gathered for this long after the first "
        "one, then synced at once.",
    )
    source_sync_concurrency: int = Field(
        8,
        ge=1,
        le=64,
        description="Files one sync reads, hashes and uploads at once.",
    )
    quota_sources: int = Field(20, ge=0, description="Sources a tenant may keep; 0 = no limit.")

    @field_validator("source_roots", "source_private_hosts", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        """`RAGBUS_SOURCE_ROOTS=/srv/docs,/mnt/share`, as well as a JSON list."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()] or None
        return value
