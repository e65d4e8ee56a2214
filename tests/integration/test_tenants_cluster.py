"""Tenancy on a three-node JetStream cluster in operator mode, as an operator runs it on their
own NATS: every node configured once with `ragbus tenant nats-config`'s lines, the roles
connected as the service account's user, tenants made and revoked through the resolver.

- A tenant made (or revoked) through one node takes effect on every node within 5 s, with no
  restart and no reload; twenty tenants made in a row each do, every one.
- One credential of a tenant revoked alone is refused on every node, and another credential
  of the same tenant connects on every node.
- Every attack of `bus_attacks`, tried across the nodes: 0 leaks.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import nats
import nats.errors
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import StreamConfig
from nats.js.errors import BadRequestError

from infra.runtime.nats_cluster import NatsCluster
from infra.runtime.services import LocalService, ServiceError, refuse_nats_without_accounts
from infra.settings import Settings
from infra.tenancy import tenants
from infra.tenancy.accounts import connect_with_creds
from infra.tenancy.trust import load
from tests.integration import bus_attacks
from tests.integration.polling import until

pytestmark = pytest.mark.integration

TAKES_EFFECT_WITHIN_S = 5.0


@dataclass
class Tenancy:
    cluster: NatsCluster
    settings: Settings
    redis: aioredis.Redis
    service: NATS

    @property
    def service_creds(self) -> str:
        return str(self.settings.nats_creds)


@pytest.fixture(scope="module")
async def tenancy(
    tmp_path_factory: pytest.TempPathFactory, redis_server: LocalService
) -> AsyncIterator[Tenancy]:
    root = tmp_path_factory.mktemp("tenancy-cluster")
    trust = load(root / "trust", create=True)
    cluster = NatsCluster(root, trust=trust)
    await asyncio.to_thread(cluster.start)
    try:
        await _every_node_is_ours(cluster, str(trust.system_creds))
        settings = Settings(
            nats_url=cluster.url,
            redis_url=redis_server.url,
            data_dir=root / "data",
            auth_mode="tenants",
            nats_trust_dir=root / "trust",
            nats_creds=trust.service_creds,
            stream_replicas=3,
        )
        redis = aioredis.from_url(settings.redis_url)
        service = await nats.connect(
            settings.nats_servers, user_credentials=settings.nats_credentials
        )
        try:
            await _declare_events(service)

            async def intake(msg: Msg) -> None:  # the API's answer to a batch it refuses
                await msg.respond(json.dumps({"status": 422, "error": "invalid batch"}).encode())

            await service.subscribe("rag.intake.*", queue="ragbus-intake", cb=intake)
            await service.flush()
            yield Tenancy(cluster, settings, redis, service)
        finally:
            await service.close()
            await redis.aclose()
    finally:
        cluster.stop()


async def _every_node_is_ours(cluster: NatsCluster, system_creds: str) -> None:
    """Each node's URL answers as that node, from a live process: a port taken by another
    test's server between `free_port` and the node's start would otherwise pass for it."""
    for node in cluster.nodes:
        nc = await nats.connect([node.url], user_credentials=system_creds, allow_reconnect=False)
        try:
            name = (getattr(nc, "_server_info", None) or {}).get("server_name")
        finally:
            await nc.close()
        assert node.alive and name == node.name, (node.url, node.name, name, node.alive)


async def _declare_events(service: NATS) -> None:
    """The service account's RAG_EVENTS on three replicas; a busy machine's cluster may not
    count every node as a JetStream peer yet: tried again for 30 s."""
    js = service.jetstream()
    events = StreamConfig(name="RAG_EVENTS", subjects=["rag.events.>"], num_replicas=3)

    async def declared() -> Exception | None:
        try:
            await js.add_stream(events)
        except BadRequestError as exc:  # "no suitable peers for placement"
            return exc
        return None

    refused = await until(declared, 30.0, satisfied=lambda error: error is None, interval=0.2)
    assert refused is None, f"the cluster never took a 3-replica stream: {refused}"


async def _quiet(_: Exception) -> None:
    """No traceback from nats-py for a refusal the test expects."""


async def _refusal(url: str, creds: str) -> str | None:
    """Why the node refuses the credentials; None when it takes them."""
    try:
        nc = await connect_with_creds(
            [url],
            creds,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=1,
            error_cb=_quiet,
        )
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    await nc.close()
    return None


async def _until_every_node(
    tenancy: Tenancy, creds: str, *, connects: bool, within_s: float = 30.0
) -> float:
    """Seconds until every node takes (or refuses) the credentials; the assertion, after
    `within_s`, names each node still lagging, what it said, and whether its process lives."""
    started = time.monotonic()
    pending = {node.url: "not asked yet" for node in tenancy.cluster.nodes}
    while pending:
        if time.monotonic() - started > within_s:
            alive = {node.url: node.alive for node in tenancy.cluster.nodes}
            lagging = {
                url: (said, "alive" if alive[url] else "dead") for url, said in pending.items()
            }
            raise AssertionError(
                f"nodes still {'refusing' if connects else 'taking'} after {within_s:g} s: "
                f"{lagging}"
            )
        said = {url: await _refusal(url, creds) for url in pending}
        pending = {url: why or "took it" for url, why in said.items() if (why is None) != connects}
        if pending:
            await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_a_tenant_made_and_revoked_reaches_every_node_within_seconds(
    tenancy: Tenancy,
) -> None:
    started = time.monotonic()
    made = await tenants.create(tenancy.redis, tenancy.settings, "delta")
    assert made.nats_creds is not None
    on_all = (
        time.monotonic()
        - started
        + await _until_every_node(tenancy, made.nats_creds, connects=True)
    )
    assert on_all <= TAKES_EFFECT_WITHIN_S, on_all
    # its stream is on three nodes
    nc = await connect_with_creds([tenancy.cluster.nodes[2].url], made.nats_creds)
    try:
        info = await nc.jetstream().stream_info("RAG_EVENTS")
        assert info.config.num_replicas == 3
        live = await nc.subscribe("rag.events.delta.>")
        await nc.flush()
        # the subscription's interest crosses the import and the routes: published until
        # it is there (the tenant's stream has had every copy meanwhile)
        deadline = time.monotonic() + TAKES_EFFECT_WITHIN_S
        while True:
            await tenancy.service.jetstream().publish("rag.events.delta.r1", b'{"type": "x"}')
            try:
                assert (await live.next_msg(timeout=0.5)).subject == "rag.events.delta.r1"
                break
            except nats.errors.TimeoutError:
                assert time.monotonic() < deadline, "no live event within 5 s"
        # and its stream keeps them: the copy into it may land a moment after the live event
        stored = await until(
            lambda: nc.jetstream().stream_info("RAG_EVENTS"),
            max(0.0, deadline - time.monotonic()),
            satisfied=lambda info: info.state.messages >= 1,
        )
        assert stored.state.messages >= 1
    finally:
        await nc.close()

    started = time.monotonic()
    await tenants.revoke(tenancy.redis, tenancy.settings, "delta")
    off_all = (
        time.monotonic()
        - started
        + await _until_every_node(tenancy, made.nats_creds, connects=False)
    )
    assert off_all <= TAKES_EFFECT_WITHIN_S, off_all
    print(
        json.dumps(
            {"create_on_3_nodes_s": round(on_all, 3), "revoke_on_3_nodes_s": round(off_all, 3)}
        )
    )


async def test_twenty_new_tenants_in_a_row_each_reach_every_node_within_5_s(
    tenancy: Tenancy,
) -> None:
    """A new tenant is on every node when `create` answers (`infra.tenancy.spread` checks
    each node before it does): twenty in a row, every node taking each one's credentials at
    once, with no wait for the resolvers to compare notes."""
    seconds, at_once = [], 0
    for i in range(20):
        started = time.monotonic()
        made = await tenants.create(tenancy.redis, tenancy.settings, f"wave-{i}")
        assert made.nats_creds is not None
        created = time.monotonic() - started
        first = await asyncio.gather(
            *(_refusal(node.url, made.nats_creds) for node in tenancy.cluster.nodes)
        )
        at_once += first == [None] * len(first)
        await _until_every_node(
            tenancy,
            made.nats_creds,
            connects=True,
            within_s=max(0.0, TAKES_EFFECT_WITHIN_S - (time.monotonic() - started)),
        )
        seconds.append((round(created, 3), round(time.monotonic() - started, 3)))
    assert max(total for _, total in seconds) <= TAKES_EFFECT_WITHIN_S, seconds
    print(
        json.dumps({"tenants": 20, "on_every_node_at_once": at_once, "create_and_all_s": seconds})
    )


async def test_one_credential_is_refused_on_every_node_and_another_taken(
    tenancy: Tenancy,
) -> None:
    made = await tenants.create(tenancy.redis, tenancy.settings, "twin")
    assert made.nats_creds is not None and made.nats_user is not None
    other, _ = await tenants.issue_creds(tenancy.redis, tenancy.settings, "twin", "other")
    started = time.monotonic()
    await tenants.revoke_creds(tenancy.redis, tenancy.settings, "twin", made.nats_user)
    off_all = (
        time.monotonic()
        - started
        + await _until_every_node(
            tenancy, made.nats_creds, connects=False, within_s=TAKES_EFFECT_WITHIN_S
        )
    )
    assert off_all <= TAKES_EFFECT_WITHIN_S, off_all
    await _until_every_node(tenancy, other, connects=True, within_s=0.5)


async def test_no_tenant_reaches_another_or_ragbus_on_a_cluster(tenancy: Tenancy) -> None:
    victim = await tenants.create(tenancy.redis, tenancy.settings, "north")
    attacker = await tenants.create(tenancy.redis, tenancy.settings, "south")
    assert victim.nats_creds and attacker.nats_creds
    nodes = [node.url for node in tenancy.cluster.nodes]
    await bus_attacks.assert_no_leak(
        bus_attacks.Parties(
            # ragbus, the victim and the attacker each on a node of its own
            servers=nodes[:1],
            victim_servers=nodes[1:2],
            attacker_servers=nodes[2:],
            service_creds=tenancy.service_creds,
            attacker="south",
            victim="north",
            attacker_creds=attacker.nats_creds,
            victim_creds=victim.nats_creds,
        )
    )


def test_tenants_mode_refuses_a_nats_that_takes_anyone(
    tenancy: Tenancy, own_nats: LocalService
) -> None:
    """A NATS without accounts (no credentials asked) would put every tenant in one account
    again: `ragbus up` in tenants mode refuses it in a sentence; the operator's cluster is
    taken."""
    refuse_nats_without_accounts(tenancy.settings)
    plain = tenancy.settings.model_copy(update={"nats_url": own_nats.url})
    with pytest.raises(ServiceError, match="takes clients without credentials"):
        refuse_nats_without_accounts(plain)
