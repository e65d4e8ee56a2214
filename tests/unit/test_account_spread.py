"""An account JWT reaches every node before a command answers (`infra.tenancy.spread`), on a
fake cluster whose nodes can miss a push, as a node whose route dropped the update does: it
is pushed again on its own connection until it serves the JWT, and a node that never does is
named in the error. The real servers' timing is tests/integration/test_tenants_cluster.py's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from infra.settings import Settings
from infra.tenancy import jwt, spread
from infra.tenancy.accounts import CLAIMS_UPDATE, BusTenancyError, TenantAccount, account_jwt
from infra.tenancy.trust import Trust, load


@dataclass
class FakeServer:
    """One node: the account JWTs it holds, how many pushes on other nodes' connections it
    will still miss, and how many users it will still refuse while it applies a JWT."""

    name: str
    held: dict[str, str] = field(default_factory=dict)
    misses: int = 0
    refusals: int = 0
    pushes: int = 0


@dataclass
class Reply:
    data: bytes


class FakeConnection:
    def __init__(self, cluster: dict[str, FakeServer], url: str) -> None:
        self.cluster, self.server = cluster, cluster[url]
        self._server_info = {"server_id": self.server.name}

    async def request(self, subject: str, data: bytes, timeout: float = 1) -> Reply:
        if subject == CLAIMS_UPDATE:  # every node subscribes; this one always gets it
            account = jwt.decode(data.decode())["sub"]
            for server in self.cluster.values():
                if server is self.server or server.misses == 0:
                    server.held[account] = data.decode()
                else:
                    server.misses -= 1  # its route dropped this one
            self.server.pushes += 1
            return Reply(json.dumps({"data": {"code": 200}}).encode())
        assert subject == f"$SYS.REQ.SERVER.{self.server.name}.ACCOUNTZ", subject
        account = json.loads(data)["account"]
        detail = {"jwt": self.server.held[account]} if account in self.server.held else None
        return Reply(json.dumps({"data": {"account_detail": detail}}).encode())

    async def close(self) -> None:
        pass


@pytest.fixture
def trust(tmp_path: Path) -> Trust:
    return load(tmp_path / "trust", create=True)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> dict[str, FakeServer]:
    servers = {f"nats://n{i}:4222": FakeServer(f"n{i}") for i in (1, 2, 3)}

    async def probe(servers_: list[str], creds: str, **_: Any) -> FakeConnection:
        server = servers[servers_[0]]
        if server.refusals:
            server.refusals -= 1
            raise RuntimeError("nats: timeout")  # busy applying it
        user = jwt.decode(creds.splitlines()[1])
        held = server.held.get(user["nats"]["issuer_account"])
        if held is None:
            raise RuntimeError("nats: 'Authorization Violation'")  # an account it lacks
        revoked = jwt.decode(held)["nats"].get("revocations", {}).get("*")
        if revoked is not None and user["iat"] <= revoked:
            raise RuntimeError("nats: 'Authorization Violation'")
        return FakeConnection(servers, servers_[0])

    monkeypatch.setattr(spread, "connect_with_creds", probe)
    return servers


def nodes(cluster: dict[str, FakeServer]) -> list[spread.Node]:
    return [spread.Node(url, FakeConnection(cluster, url)) for url in cluster]  # type: ignore[arg-type]


def account_text(trust: Trust, tenant: TenantAccount, issued_at: int) -> str:
    return account_jwt(trust, Settings(), tenant, issued_at=issued_at)


async def test_a_node_that_missed_the_push_is_pushed_again_until_it_serves_it(
    trust: Trust, cluster: dict[str, FakeServer]
) -> None:
    tenant = TenantAccount("acme", jwt.public(jwt.new_key("account")))
    text = account_text(trust, tenant, 1_800_000_000)
    lagging = cluster["nats://n3:4222"]
    lagging.misses = 10  # the pushes on n1's and n2's connections never reach it
    await spread.settle(trust, nodes(cluster), tenant, text)
    assert all(server.held[tenant.account] == text for server in cluster.values())
    assert lagging.pushes >= 1  # its own connection's push is what it took


async def test_an_older_version_on_a_node_is_replaced_before_the_answer(
    trust: Trust, cluster: dict[str, FakeServer]
) -> None:
    tenant = TenantAccount("acme", jwt.public(jwt.new_key("account")))
    old = account_text(trust, tenant, 1_800_000_000)
    for server in cluster.values():
        server.held[tenant.account] = old
    revoked = TenantAccount(tenant.tenant, tenant.account, 1_800_000_001)
    new = account_text(trust, revoked, 1_800_000_001)
    cluster["nats://n2:4222"].misses = 1
    cluster["nats://n3:4222"].refusals = 2  # checked again until it answers
    await spread.settle(trust, nodes(cluster), revoked, new)
    assert all(server.held[tenant.account] == new for server in cluster.values())
    assert cluster["nats://n3:4222"].pushes == 3


async def test_a_node_that_never_takes_it_is_named(
    trust: Trust, cluster: dict[str, FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = TenantAccount("acme", jwt.public(jwt.new_key("account")))
    text = account_text(trust, tenant, 1_800_000_000)
    deaf = cluster["nats://n2:4222"]
    original = FakeConnection.request

    async def request(self: FakeConnection, subject: str, data: bytes, timeout: float = 1) -> Reply:
        if self.server is deaf and subject == CLAIMS_UPDATE:
            return Reply(b'{"data": {"code": 200}}')  # answers, keeps nothing
        deaf.misses = 1_000_000
        return await original(self, subject, data, timeout)

    monkeypatch.setattr(FakeConnection, "request", request)
    with pytest.raises(BusTenancyError, match=r"nats://n2:4222 refused a user of the account"):
        await spread.settle(trust, nodes(cluster), tenant, text, within_s=0.5)
