"""docker-compose.yml stays in step with the code: services, worker kinds and setting names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.settings import Settings
from launcher.layout import WORKER_KINDS

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
BACKENDS = ("nats", "redis", "qdrant", "neo4j")
ROLES = ("api", "orchestrator")
ENV_PREFIX = str(Settings.model_config.get("env_prefix", ""))


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]  # type: ignore[no-any-return]


def ragbus_services() -> list[str]:
    return [*ROLES, *(f"worker-{kind}" for kind in WORKER_KINDS)]


@pytest.mark.parametrize("name", BACKENDS)
def test_backend_has_healthcheck(services: dict[str, dict[str, Any]], name: str) -> None:
    assert name in services
    assert services[name]["healthcheck"]["test"]


def test_every_role_and_worker_kind_has_a_service(services: dict[str, dict[str, Any]]) -> None:
    missing = [name for name in ragbus_services() if name not in services]
    assert not missing, f"no compose service for {missing}"


def test_ragbus_services_are_complete(services: dict[str, dict[str, Any]]) -> None:
    for name in ragbus_services():
        service = services[name]
        assert service["command"][0] == "ragbus", name
        assert service["healthcheck"]["test"], name
        env = service["environment"]
        for key in ("RAGBUS_NATS_URL", "RAGBUS_REDIS_URL", "RAGBUS_START_SERVICES"):
            assert key in env, f"{name} lacks {key}"
        assert str(env["RAGBUS_START_SERVICES"]).lower() == "false"
        for backend, condition in service["depends_on"].items():
            assert backend in BACKENDS
            assert condition["condition"] == "service_healthy"
    for kind in WORKER_KINDS:
        assert services[f"worker-{kind}"]["command"] == ["ragbus", "worker", kind]


def test_stores_come_up_before_the_workers_that_use_them(
    services: dict[str, dict[str, Any]],
) -> None:
    for name in ("worker-search", "worker-ingest"):
        assert set(services[name]["depends_on"]) == set(BACKENDS), name


def test_every_ragbus_variable_is_a_setting() -> None:
    known = {ENV_PREFIX.upper() + field.upper() for field in Settings.model_fields}
    used = set(re.findall(r"\bRAGBUS_[A-Z0-9_]+\b", COMPOSE.read_text(encoding="utf-8")))
    assert used, "the compose file configures nothing"
    assert used <= known, f"not settings: {sorted(used - known)}"


def test_the_cluster_profile_is_three_routed_nodes_that_ragbus_lists(
    services: dict[str, dict[str, Any]],
) -> None:
    deploy = COMPOSE.parent / "infra" / "deploy"
    env = dict(
        line.split("=", 1)
        for line in (deploy / "cluster.env").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    )
    assert env["COMPOSE_PROFILES"] == "cluster"
    nodes = ["nats", "nats-2", "nats-3"]
    for node in nodes:
        assert services[node]["environment"]["NATS_SERVER_NAME"] == node
    assert all(services[node]["profiles"] == ["cluster"] for node in nodes[1:])
    routes = re.findall(r"nats-route://([\w-]+):6222", (deploy / env["NATS_CONFIG"]).read_text())
    assert sorted(routes) == sorted(nodes)
    settings = Settings(
        nats_url=env["RAGBUS_NATS_URL"], stream_replicas=int(env["RAGBUS_STREAM_REPLICAS"])
    )
    assert settings.nats_servers == [f"nats://{node}:4222" for node in nodes]
    assert settings.stream_replicas == 3


DEPLOY = COMPOSE.parent / "infra" / "deploy"


@pytest.mark.parametrize("env_file", ["tenants.env", "cluster-tenants.env"])
def test_the_tenants_profiles_trust_the_operator_that_nats_init_makes(
    services: dict[str, dict[str, Any]], env_file: str
) -> None:
    """Each NATS configuration a tenants profile names includes the operator's lines that the
    `nats-init` service writes to the trust volume, which every node mounts where the include
    points, and every node starts after it; the roles connect with the service account's
    creds from the same volume."""
    env = dict(
        line.split("=", 1)
        for line in (DEPLOY / env_file).read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert env["RAGBUS_AUTH_MODE"] == "tenants"
    assert env["RAGBUS_NATS_CREDS"].startswith("/trust/")
    init = services["nats-init"]
    assert "nats-trust:/trust" in init["volumes"]
    assert init["command"][:4] == ["ragbus", "tenant", "nats-config", "--out"]
    assert init["command"][4] == "/trust/server.conf"
    for key in ("NATS_CONFIG", "NATS_CLUSTER_CONFIG"):
        if key not in env:
            continue
        config = (DEPLOY / env[key]).read_text()
        # nats-server resolves an include against the including file's folder, /etc/nats
        assert "include ../../trust/server.conf" in config
        included = re.findall(r"^include \./(\S+)", config, re.MULTILINE)
        assert included and all((DEPLOY / name).exists() for name in included)
    nodes = ["nats", "nats-2", "nats-3"] if "cluster" in env_file else ["nats"]
    for node in nodes:
        assert "nats-trust:/trust:ro" in services[node]["volumes"], node
        assert services[node]["depends_on"]["nats-init"]["condition"] == (
            "service_completed_successfully"
        )
    for name in ragbus_services():
        assert "nats-trust:/trust:ro" in services[name]["volumes"], name
