"""An operator key (RAGBUS_ADMIN_TOKEN, RAGBUS_METRICS_TOKEN) shorter than 32 characters is
refused when the settings are read, by its name and length, never by its value; an empty
one (docker-compose's `${VAR:-}`) is unset."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from infra.config.api import OPERATOR_KEY_MIN_CHARS
from infra.settings import Settings

SHORT = "hunter2-is-no-admin-key"


@pytest.mark.parametrize("field", ["admin_token", "metrics_token"])
def test_a_short_operator_key_is_refused_by_name_and_length(field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(**{field: SHORT})  # type: ignore[arg-type]
    message = str(refused.value)
    assert f"RAGBUS_{field.upper()} is {len(SHORT)} characters long" in message
    assert f"at least {OPERATOR_KEY_MIN_CHARS}" in message
    assert SHORT not in message, "the refused key is never printed"


def test_a_short_key_from_the_environment_is_refused_without_showing_any_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGBUS_ADMIN_TOKEN", SHORT)
    monkeypatch.setenv("RAGBUS_REDIS_URL", "redis://:a-redis-password@127.0.0.1:6390/0")
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert "RAGBUS_ADMIN_TOKEN" in str(refused.value)
    assert SHORT not in str(refused.value)
    assert "a-redis-password" not in str(refused.value)


def test_a_long_key_is_taken_and_an_empty_one_is_unset() -> None:
    key = "k" * OPERATOR_KEY_MIN_CHARS
    assert Settings(admin_token=key, metrics_token=key).admin_token == key
    assert Settings(admin_token="", metrics_token="").admin_token is None
    assert Settings(admin_token="").metrics_token is None
