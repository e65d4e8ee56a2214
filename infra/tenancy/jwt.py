"""NATS JWTs (version 2), signed with nkeys: operators, accounts, users and activations.

The claims are the ones nats-server reads (nats-io/jwt v2): a header `{"typ": "JWT", "alg":
"ed25519-nkey"}`, the common claims (`jti`, `iat`, `iss`, `name`, `sub`, `exp`) and a `nats`
object typed by the claim's kind. The signature is Ed25519 over `header.payload` by the
issuer's nkey. `nkeys` (nats-io's own) makes and signs the keys; the claims are built here
because PyPI's `nats-jwt` has no activation claims, which an export to one account alone
needs, and drops tiered JetStream limits.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
import time
from typing import Any, Final, Literal

import nkeys
from nacl.signing import VerifyKey

NO_LIMIT: Final = -1
HEADER: Final = {"typ": "JWT", "alg": "ed25519-nkey"}

Kind = Literal["stream", "service"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_PREFIXES: Final = {
    "operator": nkeys.PREFIX_BYTE_OPERATOR,
    "account": nkeys.PREFIX_BYTE_ACCOUNT,
    "user": nkeys.PREFIX_BYTE_USER,
}


def new_key(kind: Literal["operator", "account", "user"]) -> nkeys.KeyPair:
    """A fresh nkey pair of that kind (its public key starts with O, A or U)."""
    return nkeys.from_seed(nkeys.encode_seed(secrets.token_bytes(32), _PREFIXES[kind]))


def is_public_key(text: str, kind: Literal["operator", "account", "user"]) -> bool:
    """`text` is a public key of that kind: its prefix, its length and its CRC-16 agree."""
    try:
        raw = base64.b32decode(text, casefold=False)
    except (binascii.Error, ValueError):
        return False
    return (
        len(raw) == 35 and raw[0] == _PREFIXES[kind] and nkeys.crc16_checksum(raw[:-2]) == raw[-2:]
    )


def from_seed(seed: str | bytes) -> nkeys.KeyPair:
    return nkeys.from_seed(bytearray(seed.encode() if isinstance(seed, str) else seed))


def public(key: nkeys.KeyPair) -> str:
    return bytes(key.public_key).decode()


def seed(key: nkeys.KeyPair) -> str:
    return bytes(key.seed).decode()


def encode(claims: dict[str, Any], signer: nkeys.KeyPair, *, issued_at: int | None = None) -> str:
    """Sign `claims` (without `iss`, `iat` or `jti`: they are set here) as `signer`; `iat` is
    now unless `issued_at` says otherwise (an account's versions are ordered by it)."""
    body = {
        **claims,
        "iss": public(signer),
        "iat": int(time.time()) if issued_at is None else issued_at,
    }
    body.pop("jti", None)
    digest = hashlib.new("sha512_256", json.dumps(body, sort_keys=True).encode()).digest()
    body["jti"] = base64.b32encode(digest).decode().rstrip("=")
    signing_input = f"{_b64(json.dumps(HEADER).encode())}.{_b64(json.dumps(body).encode())}"
    signature = bytes(signer.sign(signing_input.encode()))
    return f"{signing_input}.{_b64(signature)}"


def decode(token: str, *, verify: bool = True) -> dict[str, Any]:
    """The claims of a JWT; with `verify`, only when its issuer's key signed it."""
    head, payload, signature = token.split(".")
    claims: dict[str, Any] = json.loads(_unb64(payload))
    if verify:
        raw = base64.b32decode(claims["iss"])[1:-2]  # prefix byte, key, CRC-16
        VerifyKey(raw).verify(f"{head}.{payload}".encode(), _unb64(signature))
    return claims


def operator_claims(
    key: nkeys.KeyPair, name: str, system_account: str, signing_keys: list[str]
) -> dict[str, Any]:
    return {
        "sub": public(key),
        "name": name,
        "nats": {
            "system_account": system_account,
            "signing_keys": signing_keys,
            "type": "operator",
            "version": 2,
        },
    }


def jetstream_limits(
    *, disk: int = 0, memory: int = 0, streams: int = 0, consumers: int = 0
) -> dict[str, int]:
    """An account's JetStream limits: all 0 (the default) = no JetStream."""
    return {
        "mem_storage": memory,
        "disk_storage": disk,
        "streams": streams,
        "consumer": consumers,
    }


UNLIMITED_JETSTREAM: Final = jetstream_limits(
    disk=NO_LIMIT, memory=NO_LIMIT, streams=NO_LIMIT, consumers=NO_LIMIT
)


def account_claims(
    account: str,
    name: str,
    *,
    jetstream: dict[str, int] | None = None,
    connections: int = NO_LIMIT,
    exports: list[dict[str, Any]] | None = None,
    imports: list[dict[str, Any]] | None = None,
    signing_keys: list[str] | None = None,
    revocations: dict[str, int] | None = None,
) -> dict[str, Any]:
    limits: dict[str, Any] = {
        "subs": NO_LIMIT,
        "data": NO_LIMIT,
        "payload": NO_LIMIT,
        "imports": NO_LIMIT,
        "exports": NO_LIMIT,
        "wildcards": True,
        "conn": connections,
        "leaf": 0,
        **(jetstream or jetstream_limits()),
    }
    nats: dict[str, Any] = {
        "limits": limits,
        "default_permissions": {"pub": {}, "sub": {}},
        "type": "account",
        "version": 2,
    }
    if exports:
        nats["exports"] = exports
    if imports:
        nats["imports"] = imports
    if signing_keys:
        nats["signing_keys"] = signing_keys
    if revocations:
        nats["revocations"] = revocations
    return {"sub": account, "name": name, "nats": nats}


def export(name: str, subject: str, kind: Kind, *, token_required: bool = True) -> dict[str, Any]:
    claim: dict[str, Any] = {"name": name, "subject": subject, "type": kind}
    if token_required:
        claim["token_req"] = True
    if kind == "service":
        claim["response_type"] = "Singleton"
    return claim


def import_(
    name: str,
    subject: str,
    account: str,
    kind: Kind,
    token: str,
    *,
    local_subject: str | None = None,
) -> dict[str, Any]:
    """For a stream, `subject` is the exporter's and `local_subject` what the importer
    subscribes to; for a service, `local_subject` is what the importer publishes to and
    `subject` the exporter's."""
    claim: dict[str, Any] = {
        "name": name,
        "subject": subject,
        "account": account,
        "type": kind,
        "token": token,
    }
    if local_subject:
        claim["local_subject"] = local_subject
    return claim


def activation(exporter: nkeys.KeyPair, importer: str, subject: str, kind: Kind, name: str) -> str:
    """The token by which `exporter` grants `importer` (an account's public key) `subject` of
    an export that requires one; nobody else can use it."""
    claims = {
        "sub": importer,
        "name": name,
        "nats": {"subject": subject, "kind": kind, "type": "activation", "version": 2},
    }
    return encode(claims, exporter)


def user_claims(
    user: str,
    name: str,
    *,
    issuer_account: str | None = None,
    publish_allow: list[str] | None = None,
    publish_deny: list[str] | None = None,
    subscribe_allow: list[str] | None = None,
    subscribe_deny: list[str] | None = None,
    expires_at: int | None = None,
) -> dict[str, Any]:
    def rule(allow: list[str] | None, deny: list[str] | None) -> dict[str, list[str]]:
        return {
            **({"allow": allow} if allow else {}),
            **({"deny": deny} if deny else {}),
        }

    nats: dict[str, Any] = {
        "pub": rule(publish_allow, publish_deny),
        "sub": rule(subscribe_allow, subscribe_deny),
        "subs": NO_LIMIT,
        "data": NO_LIMIT,
        "payload": NO_LIMIT,
        "type": "user",
        "version": 2,
    }
    if issuer_account:
        nats["issuer_account"] = issuer_account
    claims: dict[str, Any] = {"sub": user, "name": name, "nats": nats}
    if expires_at is not None:
        claims["exp"] = expires_at
    return claims


CREDS_TEMPLATE: Final = """-----BEGIN NATS USER JWT-----
{jwt}
------END NATS USER JWT------

************************* IMPORTANT *************************
NKEY Seed printed below can be used to sign and prove identity.
NKEYs are sensitive and should be treated as secrets.

-----BEGIN USER NKEY SEED-----
{seed}
------END USER NKEY SEED------

*************************************************************
"""


def creds(user_jwt: str, user_key: nkeys.KeyPair) -> str:
    """A `.creds` file's text: what `nats.connect(user_credentials=PATH)` and the nats CLI
    read."""
    return CREDS_TEMPLATE.format(jwt=user_jwt, seed=seed(user_key))
