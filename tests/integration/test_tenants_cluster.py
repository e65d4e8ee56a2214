"""Tenancy on a three-node JetStream cluster in operator mode, as an operator runs it on their
own NATS: every node configured once with `ragbus tenant nats-config`'s lines, the roles
connected as the service account's user, tenants made and revoked through the resolver.

- A tenant made (or revoked) through one node takes effect on every node within 5 s, with no
  restart and no reload.
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
    service = await nats.connect(settings.nats_servers, user_credentials=settings.nats_credentials)
    js = service.jetstream()
    await js.add_stream(StreamConfig(name="RAG_EVENTS", subjects=["rag.events.>"], num_replicas=3))

    async def intake(msg: Msg) -> None:  # the API's answer to a batch it refuses
        await msg.respond(json.dumps({"status": 422, "error": "invalid batch"}).encode())

    await service.subscribe("rag.intake.*", queue="ragbus-intake", cb=intake)
    await service.flush()
    try:
        yield Tenancy(cluster, settings, redis, service)
    finally:
        await service.close()
        await redis.aclose()
        cluster.stop()


async def _connects(url: str, creds: str) -> bool:
    try:
        nc = await connect_with_creds(
            [url], creds, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=1
        )
    except Exception:
        return False
    await nc.close()
    return True


async def _until_every_node(tenancy: Tenancy, creds: str, *, connects: bool) -> float:
    """Seconds until every node takes (or refuses) the credentials."""
    started = time.monotonic()
    pending = [node.url for node in tenancy.cluster.nodes]
    while pending:
        assert time.monotonic() - started < 30, (
            f"nodes still {'refusing' if connects else 'taking'}: {pending}"
        )
        pending = [url for url in pending if await _connects(url, creds) != connects]
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
