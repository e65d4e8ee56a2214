"""Settings refuse a configuration that cannot work, and name what to change."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from infra.settings import Settings


def test_a_step_deadline_longer_than_the_request_is_refused_by_name() -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(request_timeout_s=50, generate_timeout_s=60)
    message = str(refused.value)
    assert "RAGBUS_GENERATE_TIMEOUT_S=60" in message
    assert "RAGBUS_REQUEST_TIMEOUT_S=50" in message
    assert "CLASSIFY" not in message, "only the offending deadlines are named"


def test_the_defaults_and_consistent_deadlines_are_accepted() -> None:
    Settings()
    Settings(request_timeout_s=61, generate_timeout_s=60)


def test_a_cluster_is_a_comma_separated_list_of_its_nodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings(nats_url="nats://n1:4222, nats://n2:4222,nats://n3:4222")
    assert settings.nats_servers == ["nats://n1:4222", "nats://n2:4222", "nats://n3:4222"]
    monkeypatch.delenv("RAGBUS_NATS_URL", raising=False)  # the default, whatever the shell set
    assert Settings().nats_servers == ["nats://127.0.0.1:4222"]


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("nats://127.0.0.1:44611,nats:", "'nats:'"),
        ("nats://a:4222;nats://b:4222", "no valid port"),
        ("http://a:4222", "not a NATS URL"),
        (" , ", "names no server"),
    ],
)
def test_a_nats_url_that_cannot_work_is_refused_with_the_bad_part(url: str, named: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(nats_url=url)
    assert named in str(refused.value)


def test_streams_are_placed_by_the_replica_and_tag_settings() -> None:
    from infra.runtime.topology import stream_config, stream_specs

    one = Settings()
    spec = stream_specs(one)[0]
    assert stream_config(spec, one).num_replicas == 1
    assert stream_config(spec, one).placement is None
    three = Settings(stream_replicas=3, stream_placement_tags="zone:a, ssd")
    config = stream_config(spec, three)
    assert config.num_replicas == 3
    assert config.placement is not None and config.placement.tags == ["zone:a", "ssd"]


def test_a_log_line_never_shows_a_cluster_nodes_password() -> None:
    from infra.runtime.services import redacted

    shown = redacted("nats://ragbus:s3cret@n1:4222,nats://ragbus:s3cret@n2:4222")
    assert "s3cret" not in shown
    assert shown == "nats://ragbus:***@n1:4222,nats://ragbus:***@n2:4222"
