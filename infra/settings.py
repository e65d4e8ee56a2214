"""Configuration from `RAGBUS_*` environment variables (and an optional `.env`).

`Settings` is composed of the groups in `infra.config`, one per concern; it adds the
environment (prefix, `.env` file), the logs' two settings and the one validator that spans
groups. Its fields keep the order docs/configuration.md lists them in: pydantic collects a
model's fields from its bases last-listed first, so the groups are listed last to first.
"""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from infra.config.api import ApiSettings
from infra.config.delivery import DeliverySettings
from infra.config.files import FileSettings
from infra.config.generation import GenerationSettings
from infra.config.mcp import McpSettings
from infra.config.retrieval import RetrievalSettings
from infra.config.saga import SagaSettings
from infra.config.services import ServiceSettings
from infra.config.sources import SourceSettings


class Settings(
    McpSettings,
    SourceSettings,
    GenerationSettings,
    FileSettings,
    RetrievalSettings,
    DeliverySettings,
    SagaSettings,
    ApiSettings,
    ServiceSettings,
    BaseSettings,
):
    """Every knob ragbus reads. docs/configuration.md lists each with its default, and a unit
    test (`tests/unit/test_readme.py`) fails when the page and this class disagree."""

    model_config = SettingsConfigDict(
        env_prefix="RAGBUS_",
        env_file=".env",
        extra="ignore",
        # a refused setting is named by its message; the values (tokens, passwords in URLs)
        # stay out of the error, and so out of logs and terminals
        hide_input_in_errors=True,
    )

    # Observability
    log_level: str = Field("INFO", description="Log level.")
    log_json: bool = Field(True, description="JSON logs (false: human-readable console).")

    @field_validator("auth_mode", "nats_creds", "nats_trust_dir", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """`RAGBUS_AUTH_MODE=` (docker-compose's `${VAR:-}`) means unset, not a value."""
        return None if value == "" else value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
