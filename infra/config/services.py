"""Where ragbus's services and stores are: the NATS servers (a cluster's nodes, its streams'
replicas and placement, the credentials), Redis, the data directory, and a Qdrant or Neo4j
server when one replaces an embedded store. The embedded stores' directories under the data
directory are derived here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, Field, field_validator

NATS_SCHEMES = ("nats", "tls", "ws", "wss")


def nats_servers(value: str) -> list[str]:
    """`nats://a:4222,nats://b:4222` as `["nats://a:4222", "nats://b:4222"]`; each URL must
    name a host, and its port must be a number (nats-py takes a list, not a joined string)."""
    urls = [part.strip() for part in value.split(",") if part.strip()]
    if not urls:
        raise ValueError("RAGBUS_NATS_URL names no server")
    for url in urls:
        parsed = urlparse(url if "://" in url else f"nats://{url}")
        try:
            if parsed.netloc.endswith(":"):
                raise ValueError("empty port")
            parsed.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            raise ValueError(
                f"RAGBUS_NATS_URL: {url!r} has no valid port; a cluster is written "
                "nats://host1:4222,nats://host2:4222"
            ) from None
        if parsed.scheme not in NATS_SCHEMES or not parsed.hostname:
            raise ValueError(
                f"RAGBUS_NATS_URL: {url!r} is not a NATS URL (nats://host:port, "
                "comma-separated for a cluster)"
            )
    return urls


SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379
DEFAULT_SERVICE = "ragbus"


@dataclass(frozen=True)
class SentinelTarget:
    """A `redis+sentinel://` URL, read: where the sentinels are, which primary they watch
    (`service`), the database, and the credentials (for the servers and the sentinels)."""

    sentinels: list[tuple[str, int]]
    service: str
    db: int
    username: str | None
    password: str | None


def is_sentinel_url(url: str) -> bool:
    return url.startswith(f"{SENTINEL_SCHEME}://")


def sentinel_target(url: str) -> SentinelTarget:
    """`redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]…]/SERVICE[/DB]`; a
    ValueError that names what is wrong otherwise."""
    if not is_sentinel_url(url):
        raise ValueError(f"not a {SENTINEL_SCHEME}:// URL")
    rest = url[len(SENTINEL_SCHEME) + 3 :].split("?", 1)[0]
    userinfo, _, located = rest.rpartition("@")
    hosts, _, path = located.partition("/")
    sentinels: list[tuple[str, int]] = []
    for part in (p.strip() for p in hosts.split(",")):
        if not part:
            continue
        host, _, port = part.rpartition(":") if ":" in part else (part, "", "")
        if not host or (port and not port.isdigit()):
            raise ValueError(f"RAGBUS_REDIS_URL: the sentinel {part!r} is not HOST:PORT")
        sentinels.append((host, int(port) if port else SENTINEL_PORT))
    if not sentinels:
        raise ValueError("RAGBUS_REDIS_URL names no sentinel (redis+sentinel://HOST:PORT,…/NAME)")
    names = [unquote(p) for p in path.split("/") if p]
    if len(names) > 2 or (len(names) == 2 and not names[1].isdigit()):
        raise ValueError("RAGBUS_REDIS_URL: the path is /SERVICE or /SERVICE/DB (a number)")
    username, password = None, None
    if userinfo:
        user, has_password, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if has_password else None
    return SentinelTarget(
        sentinels,
        names[0] if names else DEFAULT_SERVICE,
        int(names[1]) if len(names) == 2 else 0,
        username,
        password,
    )


class ServiceSettings(BaseModel):
    """Services and stores: one group of `infra.settings.Settings`."""

    nats_url: str = Field(
        "nats://127.0.0.1:4222",
        description="NATS server with JetStream; a cluster as its nodes' URLs, comma-separated "
        "(clients connect to any and fail over to the others).",
    )
    stream_replicas: int = Field(
        1,
        ge=1,
        le=5,
        description="Replicas of each JetStream stream and its consumers: 1 on one server, 3 on "
        "a three-node cluster (a stream then survives the loss of any one node).",
    )
    stream_placement_tags: str | None = Field(
        None,
        description="Server tags (nats-server `server_tags`, comma-separated) a stream's "
        "replicas must carry, e.g. a zone or a disk class; unset = any node of the cluster.",
    )
    nats_creds: Path | None = Field(
        None,
        description="A `.creds` file (user JWT and nkey seed) the roles connect to NATS with: "
        "the service account's user in `tenants` mode on a NATS run elsewhere "
        "(`ragbus tenant nats-config` writes it); unset = none, or the one `ragbus up` makes "
        "for the nats-server it starts.",
    )
    nats_trust_dir: Path | None = Field(
        None,
        description="`tenants` mode: the NATS operator's keys that sign every account "
        "(`infra/tenancy/trust.py`); unset = `$RAGBUS_DATA_DIR/nats/trust`.",
    )
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis for saga state: `redis://[:PASSWORD@]HOST:PORT/DB`, or Redis with "
        "failover through its sentinels, `redis+sentinel://[:PASSWORD@]HOST:PORT,HOST:PORT,"
        "HOST:PORT/SERVICE/DB` (`ragbus up` starts a primary, a replica and three sentinels "
        "when none answers there).",
    )
    redis_wait_replicas: int | None = Field(
        None,
        ge=0,
        le=5,
        description="Replicas a write that matters (a saga's commit, an idempotency key, a "
        "session's turn, a quota's grant) waits for with `WAIT` before anyone hears of it; "
        "unset = 1 behind sentinels, 0 on a single Redis.",
    )
    redis_wait_timeout_ms: int = Field(
        1000,
        ge=1,
        le=60_000,
        description="How long that `WAIT` lasts before the write stands on the primary alone "
        "(logged and counted: `ragbus_redis_unreplicated_writes_total`).",
    )
    data_dir: Path = Field(Path(".ragbus"), description="Local stores and started services' data.")
    models_dir: Path | None = Field(
        None,
        description="Where the models ragbus derives from installed ones are kept (the "
        "encoder's ONNX export, keyed by the model's files); unset = `$RAGBUS_DATA_DIR/models`. "
        "Stacks on one machine may share one: the first process exports, the others wait for it "
        "and read the same file.",
    )
    start_services: bool = Field(
        True, description="Start nats-server / redis-server when the URLs are unreachable."
    )
    qdrant_url: str | None = Field(
        None, description="Qdrant server URL; unset = the embedded Qdrant Edge store."
    )
    qdrant_api_key: str | None = Field(None, description="API key for a Qdrant server.")
    qdrant_collection_prefix: str = Field(
        "ragbus_", description="Collection name prefix (one collection per namespace)."
    )
    neo4j_uri: str | None = Field(None, description="Neo4j bolt URI; unset = embedded graph.")
    neo4j_user: str = Field("neo4j", description="Neo4j user.")
    neo4j_password: str = Field("neo4j", description="Neo4j password.")

    @field_validator("nats_url")
    @classmethod
    def _nats_urls_parse(cls, value: str) -> str:
        nats_servers(value)
        return value

    @field_validator("redis_url")
    @classmethod
    def _sentinel_url_parses(cls, value: str) -> str:
        if is_sentinel_url(value):
            sentinel_target(value)
        return value

    @property
    def nats_servers(self) -> list[str]:
        """RAGBUS_NATS_URL as the list nats-py connects to: one URL per node."""
        return nats_servers(self.nats_url)

    @property
    def nats_credentials(self) -> str | None:
        """What nats-py's `connect` (and FastStream's broker) take as `user_credentials`."""
        return str(self.nats_creds) if self.nats_creds else None

    @property
    def trust_dir(self) -> Path:
        return self.nats_trust_dir or self.data_dir / "nats" / "trust"

    @property
    def placement_tags(self) -> list[str]:
        tags = self.stream_placement_tags or ""
        return [tag.strip() for tag in tags.split(",") if tag.strip()]

    @property
    def qdrant_path(self) -> Path:
        """Where qdrant-client's local mode kept vectors before Qdrant Edge (legacy)."""
        return self.data_dir / "qdrant"

    @property
    def vectors_path(self) -> Path:
        """The embedded Qdrant Edge store: one shard per namespace."""
        return self.data_dir / "vectors"

    @property
    def memory_path(self) -> Path:
        """The embedded semantic memory: one shard per memory scope."""
        return self.data_dir / "memory"

    @property
    def models_path(self) -> Path:
        """Models ragbus derives from installed ones (the encoder's ONNX export)."""
        return self.models_dir or self.data_dir / "models"

    @property
    def graph_path(self) -> Path:
        return self.data_dir / "graph"
