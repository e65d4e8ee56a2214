"""A tenant's account JWT on every NATS node, checked there before a command answers.

A JWT handed to `$SYS.REQ.CLAIMS.UPDATE` goes to every node subscribed to that subject, and
the request returns with the first node's answer: one that missed it (a route down or slow at
that moment) learns it only when its resolver next compares notes with the others
(`interval`, two minutes). So ragbus pushes the JWT on a connection of its own to each node
`RAGBUS_NATS_URL` lists (a node always takes what its own clients publish), then checks each
node with a short-lived user of the account:

- an active tenant's user must connect, and the node must report exactly this JWT for the
  account (`$SYS.REQ.SERVER.<id>.ACCOUNTZ`), with whatever users it revokes;
- a revoked tenant's user, issued when the tenant was revoked, must be refused.

A node that does not yet is pushed again and checked again, for up to `ACCOUNT_SPREAD_S`; then
the command fails naming the node and what it said. A node that cannot be reached at all is
skipped with a warning (a cluster keeps working with a node down, and a node that comes back
asks the others for what it missed); with none reachable the command fails.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import nats
from nats.aio.client import Client as NATS

from infra.logging import get_logger
from infra.runtime.services import redacted
from infra.settings import Settings
from infra.tenancy import jwt
from infra.tenancy.accounts import (
    ACCOUNT_SPREAD_S,
    BusTenancyError,
    TenantAccount,
    connect_with_creds,
    push,
)
from infra.tenancy.trust import Trust

log = get_logger(__name__)

NODE_TIMEOUT_S = 3.0
"""How long one node may take to take a connection or answer a request."""
PROBE_USER_S = 60
"""How long the user that checks a node lives."""


@dataclass
class Node:
    """One node `RAGBUS_NATS_URL` lists, and ragbus's system connection to it (None: it could
    not be reached, and `error` says why)."""

    url: str
    nc: NATS | None = None
    error: str | None = None

    @property
    def server_id(self) -> str:
        info = getattr(self.nc, "_server_info", None) or {}
        return str(info.get("server_id", ""))


def _described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


async def _quiet(_: Exception) -> None:
    """nats-py's default error callback logs a traceback for every refused connection; a
    refusal here is an answer, reported by the caller."""


@asynccontextmanager
async def nodes(trust: Trust, settings: Settings) -> AsyncIterator[list[Node]]:
    """A connection of the system account's user to each node; at least one must answer."""
    reached: list[Node] = []
    try:
        for url in settings.nats_servers:
            try:
                nc = await nats.connect(
                    [url],
                    user_credentials=str(trust.system_creds),
                    name="ragbus-tenancy",
                    connect_timeout=NODE_TIMEOUT_S,
                    allow_reconnect=False,
                    max_reconnect_attempts=0,
                    error_cb=_quiet,
                )
                reached.append(Node(url, nc))
            except Exception as exc:  # down, or refusing: the others may do
                reached.append(Node(url, error=_described(exc)))
                log.warning("nats_node_unreachable", url=redacted(url), error=_described(exc))
        if not any(node.nc for node in reached):
            said = "; ".join(f"{redacted(n.url)}: {n.error}" for n in reached)
            raise BusTenancyError(f"no NATS node answers the tenancy's system user ({said})")
        yield [node for node in reached if node.nc is not None]
    finally:
        for node in reached:
            if node.nc is not None:
                await node.nc.close()


async def push_to_each(reached: list[Node], account_jwt_text: str) -> None:
    """Hand the JWT to every node on its own connection."""
    for node in reached:
        assert node.nc is not None
        await push(node.nc, account_jwt_text)


async def settle(
    trust: Trust,
    reached: list[Node],
    tenant: TenantAccount,
    account_jwt_text: str,
    *,
    within_s: float = ACCOUNT_SPREAD_S,
) -> None:
    """Push the tenant's account JWT to every node and return once each serves it (see the
    module's docstring); `BusTenancyError` naming the nodes that did not within `within_s`."""
    if tenant.revoked_at is None:
        probe = _probe_creds(trust, tenant, issued_at=None)
    else:  # issued when the tenant was revoked: the revocation covers it, as every old user
        probe = _probe_creds(trust, tenant, issued_at=tenant.revoked_at)
    deadline = time.monotonic() + within_s
    pending, delay = list(reached), 0.05
    while True:
        unpushed = {node.url: await _pushed(node, account_jwt_text) for node in pending}
        checks = [_check(node, probe, tenant, account_jwt_text) for node in pending]
        said = {
            node.url: f"{verdict}{unpushed[node.url]}" if verdict is not None else None
            for node, verdict in zip(pending, await asyncio.gather(*checks), strict=True)
        }
        pending = [node for node in pending if said[node.url] is not None]
        if not pending:
            return
        if time.monotonic() + delay > deadline:
            lagging = "; ".join(f"{redacted(node.url)} {said[node.url]}" for node in pending)
            raise BusTenancyError(
                f"NATS did not take tenant {tenant.tenant!r}'s account on every node within "
                f"{within_s:g} s: {lagging}"
            )
        log.info("tenant_account_retry", tenant=tenant.tenant, nodes=len(pending))
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


async def _pushed(node: Node, account_jwt_text: str) -> str:
    """Push on the node's own connection; what went wrong, if anything, for the error (the
    node may still have the JWT from another node's push: its check decides)."""
    assert node.nc is not None
    try:
        await push(node.nc, account_jwt_text)
    except BusTenancyError:  # a resolver's refusal of the JWT: no retry changes it
        raise
    except Exception as exc:
        return f"; its push failed: {_described(exc)}"
    return ""


def _probe_creds(trust: Trust, tenant: TenantAccount, *, issued_at: int | None) -> str:
    user = jwt.new_key("user")
    claims = jwt.user_claims(
        jwt.public(user),
        "ragbus-probe",
        issuer_account=tenant.account,
        publish_deny=[">"],
        subscribe_deny=[">"],
        expires_at=int(time.time()) + PROBE_USER_S,
    )
    return jwt.creds(jwt.encode(claims, trust.tenant_issuer, issued_at=issued_at), user)


async def _check(
    node: Node, probe: str, tenant: TenantAccount, account_jwt_text: str
) -> str | None:
    """None when the node serves this version of the account; else what it did."""
    try:
        nc = await connect_with_creds(
            [node.url],
            probe,
            name="ragbus-probe",
            connect_timeout=NODE_TIMEOUT_S,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            error_cb=_quiet,
        )
    except Exception as exc:
        if tenant.revoked_at is not None and "authorization" in str(exc).lower():
            return None  # refused, as every user of a revoked tenant must be
        return f"refused a user of the account ({_described(exc)})"
    try:
        if tenant.revoked_at is not None:
            return "still takes users of the revoked account"
        served = await _served_jwt(node, tenant.account)
        return None if served == account_jwt_text else "does not report this version of the account"
    finally:
        await nc.close()


async def _served_jwt(node: Node, account: str) -> str | None:
    """The account's JWT as the node has it loaded (its ACCOUNTZ), or None."""
    assert node.nc is not None
    try:
        reply = await node.nc.request(
            f"$SYS.REQ.SERVER.{node.server_id}.ACCOUNTZ",
            json.dumps({"account": account}).encode(),
            timeout=NODE_TIMEOUT_S,
        )
        answer = json.loads(reply.data or b"{}")
    except Exception as exc:
        log.info("accountz_unanswered", url=redacted(node.url), error=_described(exc))
        return None
    detail = (answer.get("data") or {}).get("account_detail") or {}
    served = detail.get("jwt")
    return str(served) if served else None
