"""A NATS account per tenant (`tenants` mode): made, pushed to the servers, and revoked.

A tenant's account sees nothing of the service account but what it imports, each import
granted to it alone by an activation token that the service account signs:

- its events, `rag.events.<tenant>.>` (a stream import). Its account has JetStream of its
  own, with a stream `RAG_EVENTS` that ragbus makes there and that captures those events, so
  the tenant replays and resumes them with consumers of its own, named as it likes and as
  many as its account allows (`RAGBUS_TENANT_MAX_CONSUMERS`), in a namespace no other tenant
  shares;
- a service, `rag.documents` in its account, `rag.intake.<tenant>` in the service account,
  which takes its document batches (a request answered like `POST /v1/documents`).

A request's reply subject through a service import is rewritten by the server into a reply
of the exporter's own (`_R_.…`) that leads back to the importer alone, so no reply subject a
tenant chooses names anything in the service account; and nothing the tenant publishes in
its own account reaches another account at all.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Final

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError

from contracts import subjects as sj
from infra.logging import get_logger
from infra.settings import Settings
from infra.tenancy import jwt
from infra.tenancy.trust import Trust

log = get_logger(__name__)

CLAIMS_UPDATE: Final = "$SYS.REQ.CLAIMS.UPDATE"
TENANT_STREAM: Final = sj.STREAM_EVENTS
"""The stream ragbus makes in a tenant's account: its own copy of its events."""
PROTECTED_STREAM_API: Final = (
    f"$JS.API.STREAM.DELETE.{TENANT_STREAM}",
    f"$JS.API.STREAM.UPDATE.{TENANT_STREAM}",
    f"$JS.API.STREAM.PURGE.{TENANT_STREAM}",
    f"$JS.API.STREAM.MSG.DELETE.{TENANT_STREAM}",
)
"""A tenant's users may do anything in their account but remove or change the events
stream ragbus keeps there."""
ACCOUNT_SPREAD_S: Final = 10.0
"""How long a cluster's nodes may take to all know an account pushed to one of them."""
PROVISION_USER_S: Final = 120
"""How long the user that ragbus makes in a tenant's account to declare its stream lives."""


class BusTenancyError(RuntimeError):
    """The servers refused an account, or could not be reached."""


@dataclass(frozen=True)
class TenantAccount:
    """What the bus knows of a tenant: its name, its account, whether it is revoked, and
    which of its users are (user public key -> Unix seconds)."""

    tenant: str
    account: str
    revoked_at: int | None = None
    revoked_users: Mapping[str, int] = field(default_factory=dict)


def events_filter(tenant: str) -> str:
    """Every event of the tenant's: `rag.events.<tenant>.>`."""
    return f"{sj.tenant_events_prefix(tenant)}.>"


def account_jwt(
    trust: Trust, settings: Settings, tenant: TenantAccount, *, issued_at: int | None = None
) -> str:
    """The tenant's account, signed by the operator. A revoked tenant keeps its account and
    its data, but no connection: every user issued before the revocation is revoked, and the
    account takes no connection and imports nothing. A user revoked alone is in
    `revocations` by its public key: the servers refuse it and close its connections, and
    the tenant's other users are untouched."""
    revoked = tenant.revoked_at is not None
    revocations = dict(tenant.revoked_users)
    if tenant.revoked_at is not None:
        revocations["*"] = int(tenant.revoked_at)
    imports = (
        []
        if revoked
        else [
            jwt.import_(
                "events",
                events_filter(tenant.tenant),
                trust.service_account,
                "stream",
                jwt.activation(
                    trust.service,
                    tenant.account,
                    events_filter(tenant.tenant),
                    "stream",
                    f"{tenant.tenant} events",
                ),
            ),
            jwt.import_(
                "documents",
                sj.intake_subject(tenant.tenant),
                trust.service_account,
                "service",
                jwt.activation(
                    trust.service,
                    tenant.account,
                    sj.intake_subject(tenant.tenant),
                    "service",
                    f"{tenant.tenant} documents",
                ),
                local_subject=sj.TENANT_DOCUMENTS,
            ),
        ]
    )
    claims = jwt.account_claims(
        tenant.account,
        tenant.tenant,
        jetstream=jwt.jetstream_limits(
            disk=settings.tenant_events_bytes,
            streams=1,
            consumers=settings.tenant_max_consumers,
        ),
        connections=0 if revoked else settings.tenant_max_connections,
        imports=imports,
        signing_keys=[jwt.public(trust.tenant_issuer)],
        revocations=revocations or None,
    )
    return jwt.encode(claims, trust.operator, issued_at=issued_at)


def user_creds(
    trust: Trust, tenant: TenantAccount, *, name: str | None = None, lifetime_s: int | None = None
) -> str:
    """A user of the tenant's account, as a `.creds` file's text: it may do anything in its
    own account but change the events stream ragbus keeps there. Named, it is ragbus's own
    short-lived user (`lifetime_s`), which declares that stream."""
    return _user(trust, tenant, name, lifetime_s, protect_stream=name is None)[0]


def issue_user(trust: Trust, tenant: TenantAccount, name: str | None = None) -> tuple[str, str]:
    """A tenant's credential: the `.creds` file's text and its user's public key (what
    revokes it alone). It cannot change the events stream ragbus keeps in the account."""
    return _user(trust, tenant, name, None, protect_stream=True)


def _user(
    trust: Trust,
    tenant: TenantAccount,
    name: str | None,
    lifetime_s: int | None,
    *,
    protect_stream: bool,
) -> tuple[str, str]:
    user = jwt.new_key("user")
    claims = jwt.user_claims(
        jwt.public(user),
        name or tenant.tenant,
        issuer_account=tenant.account,
        publish_deny=list(PROTECTED_STREAM_API) if protect_stream else None,
        expires_at=int(time.time()) + lifetime_s if lifetime_s else None,
    )
    return jwt.creds(jwt.encode(claims, trust.tenant_issuer), user), jwt.public(user)


def _creds_options(creds_text: str) -> dict[str, object]:
    """nats-py's options for credentials held in memory (its `user_credentials` reads a
    file): the user JWT, and the nonce signed with the user's seed."""
    lines = creds_text.splitlines()
    user_jwt = lines[lines.index("-----BEGIN NATS USER JWT-----") + 1].strip()
    user_seed = lines[lines.index("-----BEGIN USER NKEY SEED-----") + 1].strip()

    def signature(nonce: str) -> bytes:
        import base64

        return base64.b64encode(jwt.from_seed(user_seed).sign(nonce.encode()))

    return {"user_jwt_cb": lambda: user_jwt.encode(), "signature_cb": signature}


async def connect_with_creds(servers: list[str], creds_text: str, **options: object) -> NATS:
    return await nats.connect(servers, **_creds_options(creds_text), **options)


@asynccontextmanager
async def system_connection(trust: Trust, settings: Settings) -> AsyncIterator[NATS]:
    nc = await nats.connect(
        settings.nats_servers,
        user_credentials=str(trust.system_creds),
        name="ragbus-tenancy",
        connect_timeout=3,
        max_reconnect_attempts=3,
    )
    try:
        yield nc
    finally:
        await nc.close()


async def push(nc: NATS, account_jwt_text: str, timeout_s: float = 5.0) -> None:
    """Hand an account JWT to the servers' resolver; every node of a cluster takes it."""
    reply = await nc.request(CLAIMS_UPDATE, account_jwt_text.encode(), timeout=timeout_s)
    answer = json.loads(reply.data or b"{}")
    if "error" in answer:
        raise BusTenancyError(f"the NATS resolver refused the account: {answer['error']}")


async def declare_stream(trust: Trust, settings: Settings, tenant: TenantAccount) -> None:
    """The tenant's own `RAG_EVENTS`, declared by a short-lived user of its account. On a
    cluster the node that took the account passes it to the others within moments: a node
    that does not know it yet (it refuses the user, or says the account has no JetStream) is
    tried again, for up to `ACCOUNT_SPREAD_S`."""
    creds_text = user_creds(trust, tenant, name="ragbus-provisioner", lifetime_s=PROVISION_USER_S)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ACCOUNT_SPREAD_S
    delay = 0.05
    while True:
        try:
            await _declare_stream(settings, tenant, creds_text)
            return
        except (nats.errors.Error, nats.js.errors.ServiceUnavailableError) as exc:
            if loop.time() + delay > deadline:
                raise
            log.info("tenant_stream_retry", tenant=tenant.tenant, error=str(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


async def _declare_stream(settings: Settings, tenant: TenantAccount, creds_text: str) -> None:
    nc = await connect_with_creds(
        settings.nats_servers,
        creds_text,
        name="ragbus-provisioner",
        connect_timeout=3,
        allow_reconnect=False,  # `declare_stream` tries again, maybe on another node
    )
    try:
        js = nc.jetstream()
        config = StreamConfig(
            name=TENANT_STREAM,
            subjects=[events_filter(tenant.tenant)],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            discard=DiscardPolicy.OLD,
            max_age=settings.events_max_age_s,
            max_bytes=settings.tenant_events_bytes // settings.stream_replicas,
            num_replicas=settings.stream_replicas,
            duplicate_window=120.0,
        )
        try:
            await js.add_stream(config)
        except BadRequestError:  # there already, from an earlier try: bring it up to date
            await js.update_stream(config)
    finally:
        await nc.close()
