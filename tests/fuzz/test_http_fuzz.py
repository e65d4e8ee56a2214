"""Schemathesis over the OpenAPI document, against a real `ragbus up`: generated requests,
valid and invalid, never give a server error, and every response conforms to the documented
status codes, content types and schemas.

The document comes from the application itself (building it opens no connection); the calls
go to the stack that `up_stack` serves.
"""

from __future__ import annotations

import json
import uuid

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import negative_data_rejection, positive_data_acceptance

from api.app import create_app
from contracts.filters import FilterError, parse_filter
from infra.settings import Settings
from tests.fuzz.conftest import FUZZ_TOKEN, SCALE, UpStack

pytestmark = pytest.mark.integration

EXAMPLES = 25 * SCALE
"""Per operation: enough to cover each field's edges in CI (`make soak` tries more:
`RAGBUS_FUZZ_SCALE`); `pytest --hypothesis-seed` reproduces a run."""

schema = schemathesis.openapi.from_dict(create_app(Settings(api_token=FUZZ_TOKEN)).openapi())


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,  # the same cases on every run: CI failures reproduce
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_the_api_answers_every_generated_request_as_documented(
    case: schemathesis.Case, up_stack: UpStack
) -> None:
    if case.headers and "Idempotency-Key" in case.headers:
        # The generator reuses a key across bodies, which is a 422 by design (the IETF
        # Idempotency-Key draft's answer); a fresh key per case keeps valid bodies valid.
        case.headers["Idempotency-Key"] = uuid.uuid4().hex
    excluded = [negative_data_rejection]
    # Not held: like most HTTP APIs (FastAPI's default), ragbus ignores query parameters and
    # headers it does not know, which this check counts as accepting invalid data. Every
    # invalid value of a known field is still refused: positive and conformance checks hold.
    if (
        _two_versions_of_one_document(case)
        or _pages_out_of_order(case)
        or _filter_past_schema(case)
    ):
        # Rules no JSON Schema can state (one version per document id in a batch; a
        # document's pages in the order of their starts; a filter's depth, its counts and
        # its dates being real days, or a query parameter holding JSON): such a request is
        # a 422 by design, so it is not held to "schema-valid means accepted".
        excluded.append(positive_data_acceptance)
    elif case.path.startswith("/v1/sources") and case.method.upper() in ("POST", "PATCH"):
        # Where a source may be is the operator's to say (RAGBUS_SOURCE_ROOTS, the hosts a
        # source may reach, the shortest schedule), so a schema-valid source is a 422 by
        # design wherever it names a place or a schedule this server does not allow.
        excluded.append(positive_data_acceptance)
    elif case.media_type == "multipart/form-data":
        # Files: their bytes decide whether they are a kind read (a generated zip or PNG is
        # schema-valid, and a 415 or a 422 by design), which no JSON Schema can state.
        excluded.append(positive_data_acceptance)
    case.call_and_validate(
        base_url=up_stack.url,
        headers={"Authorization": f"Bearer {FUZZ_TOKEN}"},
        excluded_checks=excluded,
        timeout=60,
    )


FILTER_RULES_PAST_SCHEMA = (
    "nested more than",
    "conditions",
    "lists hold more than",
    "a range takes a number or an ISO 8601 date",
)
"""What `contracts.filters` refuses that its published JSON Schema cannot say."""


def _filter_past_schema(case: schemathesis.Case) -> bool:
    """A filter refused for a rule no JSON Schema states, in the body or in `GET
    /v1/documents`' `filter` parameter (a JSON text: anything not JSON is such a rule)."""
    body = case.body if isinstance(case.body, dict) else {}
    raw: object = body.get("filter")
    if case.path == "/v1/documents" and case.method.upper() == "GET":
        # The parameter's schema is a string: JSON that is not a valid filter (`7`, `[]`,
        # anything `contracts.filters` refuses) is past it as much as text that is not JSON.
        text = (case.query or {}).get("filter")
        if text is None:
            return False
        try:
            parse_filter(json.loads(str(text)))
        except (ValueError, FilterError):
            return True
        return False
    if raw is None:
        return False
    try:
        parse_filter(raw)
    except FilterError as exc:
        # the OpenAI door publishes its extra field as a plain object (its clients send
        # what they like through `extra_body`): any filter it refuses is past its schema
        plain = case.path == "/v1/chat/completions"
        return plain or any(rule in str(exc) for rule in FILTER_RULES_PAST_SCHEMA)
    return False


def _pages_out_of_order(case: schemathesis.Case) -> bool:
    body = case.body if isinstance(case.body, dict) else {}
    documents = body.get("documents") if case.path == "/v1/documents" else None
    for doc in documents if isinstance(documents, list) else []:
        pages = doc.get("pages") if isinstance(doc, dict) else None
        starts = [p.get("start") for p in pages or [] if isinstance(p, dict)]
        if all(isinstance(s, int | float) for s in starts) and starts != sorted(starts):
            return True
    return False


def _two_versions_of_one_document(case: schemathesis.Case) -> bool:
    body = case.body if isinstance(case.body, dict) else {}
    documents = body.get("documents") if case.path == "/v1/documents" else None
    if not isinstance(documents, list):
        return False
    seen: dict[tuple[str, str], object] = {}
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        key = (str(doc.get("namespace", "default")), str(doc.get("id")))
        if key in seen and seen[key] != doc:
            return True
        seen.setdefault(key, doc)
    return False
