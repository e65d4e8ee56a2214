"""The API's settings: where it listens, who may call it (the auth mode and its tokens),
what a tenant's NATS account may hold and how much a tenant may submit and keep, and how many
OS processes `ragbus up` runs the stack in.
"""

from __future__ import annotations

from typing import Final, Literal, Self

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

OPERATOR_KEY_MIN_CHARS: Final = 32
"""The shortest admin or metrics token taken: a guessable one opens every tenant's data."""


class ApiSettings(BaseModel):
    """API, tenants and processes: one group of `infra.settings.Settings`."""

    api_host: str = Field("127.0.0.1", description="API bind address.")
    api_port: int = Field(8000, description="API port.")
    api_token: str | None = Field(
        None, description="The bearer token of `token` mode (one user, one shared secret)."
    )
    auth_mode: Literal["none", "token", "tenants"] | None = Field(
        None,
        description="Who may call: `none`, `token` (RAGBUS_API_TOKEN) or `tenants` (each "
        "tenant's own API key; `ragbus tenant create`); unset = `token` when RAGBUS_API_TOKEN "
        "is set, else `none`.",
    )
    admin_token: str | None = Field(
        None,
        description="Bearer token of the admin API (`/v1/admin`), at least 32 characters "
        "(a shorter one is refused at start); unset = no admin API.",
    )
    metrics_token: str | None = Field(
        None,
        description="Bearer token of `/metrics` (a Prometheus scraper's), which the admin token "
        "opens too; in `tenants` mode also of `/openapi.json`; at least 32 characters. Unset = "
        "`/metrics` is open in `none` and `token` modes and needs the admin token in `tenants` "
        "mode.",
    )
    auth_failure_limit: int = Field(
        10,
        ge=0,
        description="Wrong keys (API, tenant, admin or metrics) one client address may offer "
        "within RAGBUS_AUTH_FAILURE_WINDOW_S before its keys are refused with 429 and "
        "`Retry-After`: 1 s after the next wrong one, then 2, 4, 8 … up to the window; a "
        "missing key is not counted, and other addresses are not slowed. 0 = never slowed.",
    )
    auth_failure_window_s: float = Field(
        600.0,
        gt=0,
        description="How long an address's wrong keys are remembered (from its latest one), "
        "and the longest it is made to wait.",
    )
    shared_event_consumer: bool = Field(
        True,
        description="The API process follows every caller event with one JetStream consumer "
        "and hands each event stream its own; false = one ordered consumer per event stream.",
    )
    tenant_max_consumers: int = Field(
        64,
        ge=1,
        description="`tenants` mode: JetStream consumers a tenant's NATS account may hold (on "
        "its own copy of its events).",
    )
    tenant_max_connections: int = Field(
        64, ge=1, description="`tenants` mode: NATS connections a tenant's account may hold."
    )
    tenant_events_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1024 * 1024,
        description="`tenants` mode: bytes of JetStream storage a tenant's account has, for its "
        "own copy of its events (the oldest go first).",
    )
    caller_max_requests: int = Field(
        64,
        ge=1,
        description="Requests one caller (one API key or token) may have running at once in "
        "an API process, event streams included; one more is answered 429 at the door, before "
        "it costs a route's work.",
    )
    quota_requests_per_s: float = Field(
        50.0, ge=0, description="Submissions per second per tenant (token bucket); 0 = no limit."
    )
    quota_burst: int = Field(100, ge=1, description="Submissions a tenant may make at once.")
    quota_documents: int = Field(
        1_000_000, ge=0, description="Documents a tenant may keep; 0 = no limit."
    )
    quota_namespaces: int = Field(
        100, ge=0, description="Namespaces a tenant may fill; 0 = no limit."
    )
    quota_bytes: int = Field(
        10_000_000_000, ge=0, description="Document text (bytes) a tenant may keep; 0 = no limit."
    )
    up_processes: int = Field(
        0,
        ge=0,
        le=2,
        description="OS processes `ragbus up` runs: 1 = everything in one, 2 = the API, saga, "
        "classifier, generation and critic in one and the other workers in a child; 0 = 2 on "
        "a machine with two cores or more.",
    )

    @field_validator("admin_token", "metrics_token", mode="before")
    @classmethod
    def _operator_key_is_long(cls, value: object, info: ValidationInfo) -> object:
        """Unset when empty (docker-compose's `${VAR:-}`); refused when short, by name and
        length, never by value."""
        if value is None or value == "":
            return None
        if isinstance(value, str) and len(value) < OPERATOR_KEY_MIN_CHARS:
            variable = f"RAGBUS_{(info.field_name or '').upper()}"
            raise ValueError(
                f"{variable} is {len(value)} characters long; an operator key needs at least "
                f"{OPERATOR_KEY_MIN_CHARS} (make one with `python -c 'import secrets; "
                f"print(secrets.token_urlsafe(32))'`), or leave {variable} unset"
            )
        return value

    @model_validator(mode="after")
    def _token_mode_has_a_token(self) -> Self:
        if self.auth_mode == "token" and not self.api_token:
            raise ValueError("RAGBUS_AUTH_MODE=token needs RAGBUS_API_TOKEN")
        return self

    @property
    def auth(self) -> Literal["none", "token", "tenants"]:
        """The auth mode in force (RAGBUS_AUTH_MODE, or what RAGBUS_API_TOKEN implies)."""
        if self.auth_mode is not None:
            return self.auth_mode
        return "token" if self.api_token else "none"
