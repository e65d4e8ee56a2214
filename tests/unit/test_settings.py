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
