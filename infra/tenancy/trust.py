"""The operator side of `tenants` mode on NATS: the keys that make and sign every account.

NATS isolates tenants by account. In `tenants` mode the servers run in operator mode
(decentralized auth): they trust one operator key, and know accounts by their JWTs, which
the operator signs and pushes to the servers' built-in account resolver
(`$SYS.REQ.CLAIMS.UPDATE`). Every node of a cluster keeps the JWTs and passes new ones on, so
a tenant made or revoked takes effect on every node within moments, with no file edited on a
server and no reload. A server's configuration names the operator once (`server_config`).

The trust directory (`RAGBUS_NATS_TRUST_DIR`, `<data>/nats/trust` by default; mode 0700)
holds the seeds and what is made from them:

- the operator (`operator.nk`), which signs the accounts;
- the system account (`system.nk`) and its user (`system.creds`), which pushes account JWTs;
- the service account (`service.nk`), where every ragbus role runs and every stream lives,
  and its user (`service.creds`, what `RAGBUS_NATS_CREDS` names for the roles);
- the tenant issuer (`tenant-issuer.nk`), a signing key of every tenant account, which signs
  the tenants' users, so no tenant account's own seed is ever kept.

The account JWTs are made again from the seeds on every load, so a newer ragbus's exports
reach the servers with its next start (`ragbus up` pushes them).

Whoever reads a seed here can make accounts and users the servers trust, and whoever writes
in the directory can swap the operator for their own: `load` refuses a key file (`*.nk`,
`*.creds`) that its group or others may read or write, and a directory its group or others
may write, naming the file and the `chmod` that fixes it (nothing is fixed silently: a key
that others could read may have been read, and the operator should know).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import nkeys

from contracts import subjects as sj
from infra.tenancy import jwt

OPERATOR_NAME: Final = "ragbus"
SYSTEM_ACCOUNT_NAME: Final = "SYS"
SERVICE_ACCOUNT_NAME: Final = "ragbus"
SEEDS: Final = {
    "operator": ("operator.nk", "operator"),
    "system": ("system.nk", "account"),
    "service": ("service.nk", "account"),
    "tenant_issuer": ("tenant-issuer.nk", "account"),
    "system_user": ("system-user.nk", "user"),
    "service_user": ("service-user.nk", "user"),
}
SERVICE_CREDS: Final = "service.creds"
SYSTEM_CREDS: Final = "system.creds"
SERVER_CONFIG: Final = "server.conf"


class TrustError(RuntimeError):
    """The trust directory is missing, unreadable or open to others, said plainly."""


def _who(mode: int, group_bits: int) -> str:
    """'group', 'others' or 'group and others': whom `mode` lets in (`group_bits`, and the
    same bits for others)."""
    parts = [
        who for who, bits in (("group", group_bits), ("others", group_bits >> 3)) if mode & bits
    ]
    return " and ".join(parts)


def check_private(directory: Path) -> None:
    """Refuse a trust directory that others may write, or a key in it others may read or
    write (`TrustError`, naming the path and the `chmod` to run)."""
    mode = stat.S_IMODE(directory.stat().st_mode)
    if mode & 0o022:
        raise TrustError(
            f"the NATS trust directory {directory} is writable by "
            f"{_who(mode, 0o020)} (mode {mode:04o}): whoever can write there can replace "
            f"the operator's keys. Run `chmod 700 {directory}` (ragbus refuses it until then)"
        )
    for name in [file for file, _ in SEEDS.values()] + [SERVICE_CREDS, SYSTEM_CREDS]:
        path = directory / name
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            raise TrustError(
                f"the NATS key file {path} is open to {_who(mode, 0o070)} (mode "
                f"{mode:04o}): it holds a secret that signs accounts or users the servers "
                f"trust. Run `chmod 600 {path}`, and consider the key exposed if anyone else "
                "could read it (ragbus refuses it until then)"
            )


def service_exports() -> list[dict[str, object]]:
    """What the service account offers tenants. Each requires an activation token, which
    the service account signs for one tenant account and one tenant's subject alone
    (`infra.tenancy.accounts`): a tenant's events, and the service that takes its document
    batches."""
    return [
        jwt.export("tenant events", f"{sj.EVENTS_PREFIX}.*.>", "stream"),
        jwt.export("tenant documents", f"{sj.INTAKE_PREFIX}.*", "service"),
    ]


@dataclass(frozen=True)
class Trust:
    dir: Path
    operator: nkeys.KeyPair
    system: nkeys.KeyPair
    service: nkeys.KeyPair
    tenant_issuer: nkeys.KeyPair
    system_user: nkeys.KeyPair
    service_user: nkeys.KeyPair

    @property
    def system_account(self) -> str:
        return jwt.public(self.system)

    @property
    def service_account(self) -> str:
        return jwt.public(self.service)

    @property
    def service_creds(self) -> Path:
        return self.dir / SERVICE_CREDS

    @property
    def system_creds(self) -> Path:
        return self.dir / SYSTEM_CREDS

    def operator_jwt(self) -> str:
        return jwt.encode(
            jwt.operator_claims(self.operator, OPERATOR_NAME, self.system_account, []),
            self.operator,
        )

    def system_jwt(self) -> str:
        return jwt.encode(
            jwt.account_claims(self.system_account, SYSTEM_ACCOUNT_NAME), self.operator
        )

    def service_jwt(self) -> str:
        return jwt.encode(
            jwt.account_claims(
                self.service_account,
                SERVICE_ACCOUNT_NAME,
                jetstream=jwt.UNLIMITED_JETSTREAM,
                exports=service_exports(),
            ),
            self.operator,
        )

    def server_config(self, resolver_dir: Path | str) -> str:
        """The lines a nats-server (every node of a cluster) needs for `tenants` mode, once:
        the operator, the system account, and the full account resolver, preloaded with the
        system and service accounts. Tenants come and go through the resolver."""
        return (
            f'operator: "{self.operator_jwt()}"\n'
            f"system_account: {self.system_account}\n"
            "resolver {\n"
            "  type: full\n"
            f'  dir: "{resolver_dir}"\n'
            "  allow_delete: false\n"
            '  interval: "2m"\n'
            '  timeout: "3s"\n'
            "}\n"
            "resolver_preload {\n"
            f'  {self.system_account}: "{self.system_jwt()}"\n'
            f'  {self.service_account}: "{self.service_jwt()}"\n'
            "}\n"
        )

    def _user_creds(self, account: nkeys.KeyPair, user: nkeys.KeyPair, name: str) -> str:
        claims = jwt.user_claims(jwt.public(user), name)
        return jwt.creds(jwt.encode(claims, account), user)

    def write_creds(self) -> None:
        _write_secret(
            self.service_creds, self._user_creds(self.service, self.service_user, "ragbus")
        )
        _write_secret(
            self.system_creds, self._user_creds(self.system, self.system_user, "ragbus-system")
        )


def _write_secret(path: Path, text: str) -> None:
    staged = path.with_name(path.name + ".tmp")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    staged.replace(path)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(OSError):  # made by someone else (a container's volume): tighten
        directory.chmod(0o700)
    with (directory / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def load(directory: Path, *, create: bool = False) -> Trust:
    """The trust in `directory`; with `create`, its missing keys are made first (under a
    lock, so two processes starting at once make one operator)."""
    directory = directory.resolve()
    if not create and not (directory / SEEDS["operator"][0]).exists():
        raise TrustError(
            f"no NATS operator keys in {directory}: run `ragbus tenant nats-config` once to "
            "make them (or point RAGBUS_NATS_TRUST_DIR at the directory that has them)"
        )
    keys: dict[str, nkeys.KeyPair] = {}
    with _locked(directory) if create else contextlib.nullcontext():
        check_private(directory)
        for field, (file, kind) in SEEDS.items():
            path = directory / file
            if path.exists():
                try:
                    keys[field] = jwt.from_seed(path.read_text().strip())
                except (OSError, nkeys.NkeysError) as exc:
                    raise TrustError(f"cannot read the NATS key {path}: {exc}") from exc
            elif create:
                keys[field] = jwt.new_key(kind)  # type: ignore[arg-type]
                _write_secret(path, jwt.seed(keys[field]) + "\n")
            else:
                raise TrustError(f"the NATS trust directory {directory} lacks {file}")
        trust = Trust(dir=directory, **keys)
        if create or not trust.service_creds.exists() or not trust.system_creds.exists():
            trust.write_creds()
    return trust
