"""The NATS JWTs of `tenants` mode, read back: who signed what, and what each account may see.

The servers' own verdicts are in tests/integration/test_tenants*.py; these check the claims."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from infra.settings import Settings
from infra.tenancy import jwt
from infra.tenancy.accounts import TenantAccount, account_jwt, user_creds
from infra.tenancy.trust import TrustError, load


@pytest.fixture
def trust(tmp_path: Path):  # type: ignore[no-untyped-def]
    return load(tmp_path / "trust", create=True)


def test_the_trust_is_made_once_and_kept_secret(tmp_path: Path) -> None:
    with pytest.raises(TrustError, match="nats-config"):
        load(tmp_path / "trust")
    first = load(tmp_path / "trust", create=True)
    again = load(tmp_path / "trust")
    assert first.service_account == again.service_account
    assert first.operator_jwt().count(".") == 2
    for path in (tmp_path / "trust").iterdir():
        if path.suffix in (".nk", ".creds"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE((tmp_path / "trust").stat().st_mode) == 0o700


def test_the_server_lines_name_the_operator_and_preload_the_service(trust) -> None:  # type: ignore[no-untyped-def]
    lines = trust.server_config("/data/jwt")
    operator = jwt.decode(lines.split('"')[1])
    assert operator["nats"]["system_account"] == trust.system_account
    assert trust.service_account in lines
    service = jwt.decode(trust.service_jwt())
    assert service["iss"] == jwt.public(trust.operator)
    assert all(export["token_req"] for export in service["nats"]["exports"])
    for seed_holder in (trust.operator, trust.service, trust.tenant_issuer):
        assert jwt.seed(seed_holder) not in lines


def test_a_tenant_imports_its_own_subjects_granted_to_it_alone(trust) -> None:  # type: ignore[no-untyped-def]
    account = jwt.public(jwt.new_key("account"))
    claims = jwt.decode(account_jwt(trust, Settings(), TenantAccount("acme", account)))
    assert claims["iss"] == jwt.public(trust.operator)
    imports = {i["name"]: i for i in claims["nats"]["imports"]}
    assert imports["events"]["subject"] == "rag.events.acme.>"
    assert imports["documents"]["subject"] == "rag.intake.acme"
    assert imports["documents"]["local_subject"] == "rag.documents"
    for imported in imports.values():
        activation = jwt.decode(imported["token"])
        assert activation["iss"] == trust.service_account  # the exporter signs it
        assert activation["sub"] == account  # for this account alone
        assert activation["nats"]["subject"] == imported["subject"]
    limits = claims["nats"]["limits"]
    assert limits["consumer"] == Settings().tenant_max_consumers
    assert limits["streams"] == 1
    assert claims["nats"]["signing_keys"] == [jwt.public(trust.tenant_issuer)]


def test_a_revoked_tenant_imports_nothing_and_takes_no_connection(trust) -> None:  # type: ignore[no-untyped-def]
    account = jwt.public(jwt.new_key("account"))
    claims = jwt.decode(
        account_jwt(trust, Settings(), TenantAccount("acme", account, 1_800_000_000))
    )
    assert "imports" not in claims["nats"]
    assert claims["nats"]["limits"]["conn"] == 0
    assert claims["nats"]["revocations"] == {"*": 1_800_000_000}


def test_a_tenants_user_is_signed_by_the_issuer_and_cannot_touch_its_stream(trust) -> None:  # type: ignore[no-untyped-def]
    account = jwt.public(jwt.new_key("account"))
    text = user_creds(trust, TenantAccount("acme", account))
    user = jwt.decode(text.splitlines()[1])
    assert user["iss"] == jwt.public(trust.tenant_issuer)
    assert user["nats"]["issuer_account"] == account
    assert "$JS.API.STREAM.DELETE.RAG_EVENTS" in user["nats"]["pub"]["deny"]
    assert "-----BEGIN USER NKEY SEED-----" in text


def test_a_tampered_jwt_is_refused() -> None:
    key = jwt.new_key("account")
    token = jwt.encode(jwt.account_claims(jwt.public(key), "x"), key)
    head, payload, signature = token.split(".")
    forged = jwt._b64(jwt._unb64(payload).replace(b'"x"', b'"y"'))
    with pytest.raises(Exception, match=r"[Ss]ignature"):
        jwt.decode(f"{head}.{forged}.{signature}")
