"""Configuration from `RAGBUS_*` environment variables (and an optional `.env`)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.ingest import MAX_FILE_BYTES, MAX_PAGES

STEP_TIMEOUTS = (
    "classify_timeout_s",
    "search_timeout_s",
    "fuse_timeout_s",
    "generate_timeout_s",
    "critic_timeout_s",
    "tool_timeout_s",
)


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


class Settings(BaseSettings):
    """Every knob ragbus reads. docs/configuration.md lists each with its default, and a unit
    test (`tests/unit/test_readme.py`) fails when the page and this class disagree."""

    model_config = SettingsConfigDict(env_prefix="RAGBUS_", env_file=".env", extra="ignore")

    # Services
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
    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Redis for saga state.")
    data_dir: Path = Field(Path(".ragbus"), description="Local stores and started services' data.")
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

    # API
    api_host: str = Field("127.0.0.1", description="API bind address.")
    api_port: int = Field(8000, description="API port.")
    api_token: str | None = Field(
        None, description="The bearer token of `token` mode (one user, one shared secret)."
    )
    auth_mode: Literal["none", "token", "tenants"] | None = Field(
        None,
        description="Who may call: `none`, `token` (RAGBUS_API_TOKEN) or `tenants` (each "
        "tenant's own API key; `ragbus tenant create`); unset = `token` when RAGBUS_API_TOKEN "
        "is set, else `none`.",
    )
    admin_token: str | None = Field(
        None, description="Bearer token of the admin API (`/v1/admin`); unset = no admin API."
    )
    metrics_token: str | None = Field(
        None,
        description="Bearer token of `/metrics` (a Prometheus scraper's), which the admin token "
        "opens too; in `tenants` mode also of `/openapi.json`. Unset = `/metrics` is open in "
        "`none` and `token` modes and needs the admin token in `tenants` mode.",
    )
    shared_event_consumer: bool = Field(
        True,
        description="The API process follows every caller event with one JetStream consumer "
        "and hands each event stream its own; false = one ordered consumer per event stream.",
    )
    tenant_max_consumers: int = Field(
        64,
        ge=1,
        description="`tenants` mode: JetStream consumers a tenant's NATS account may hold (on "
        "its own copy of its events).",
    )
    tenant_max_connections: int = Field(
        64, ge=1, description="`tenants` mode: NATS connections a tenant's account may hold."
    )
    tenant_events_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1024 * 1024,
        description="`tenants` mode: bytes of JetStream storage a tenant's account has, for its "
        "own copy of its events (the oldest go first).",
    )
    quota_requests_per_s: float = Field(
        50.0, ge=0, description="Submissions per second per tenant (token bucket); 0 = no limit."
    )
    quota_burst: int = Field(100, ge=1, description="Submissions a tenant may make at once.")
    quota_documents: int = Field(
        1_000_000, ge=0, description="Documents a tenant may keep; 0 = no limit."
    )
    quota_namespaces: int = Field(
        100, ge=0, description="Namespaces a tenant may fill; 0 = no limit."
    )
    quota_bytes: int = Field(
        10_000_000_000, ge=0, description="Document text (bytes) a tenant may keep; 0 = no limit."
    )
    up_processes: int = Field(
        0,
        ge=0,
        le=2,
        description="OS processes `ragbus up` runs: 1 = everything in one, 2 = the API, saga, "
        "classifier, generation and critic in one and the other workers in a child; 0 = 2 on "
        "a machine with two cores or more.",
    )

    # Saga
    max_attempts: int = Field(2, ge=1, le=10, description="Critic rounds per request at most.")
    max_tool_calls: int = Field(3, ge=0, le=20, description="Tool rounds per request at most.")
    request_timeout_s: float = Field(120.0, gt=0, description="Whole-request deadline.")
    classify_timeout_s: float = Field(10.0, gt=0, description="Classification step deadline.")
    search_timeout_s: float = Field(10.0, gt=0, description="Search fan-in deadline.")
    fuse_timeout_s: float = Field(10.0, gt=0, description="Fusion step deadline.")
    generate_timeout_s: float = Field(60.0, gt=0, description="Generation step deadline.")
    critic_timeout_s: float = Field(10.0, gt=0, description="Critic step deadline.")
    critique_with_generation: bool = Field(
        True,
        description="The generating worker critiques its own final answer (the critic's "
        "scoring, phase event and verdict, within RAGBUS_CRITIC_TIMEOUT_S) and reports both in "
        "one result: one hop fewer a request, whenever both deadlines fit in what is left of "
        "the request's. False: the critic is a step of its own, for deployments that run it "
        "in other processes.",
    )
    tool_timeout_s: float = Field(30.0, gt=0, description="Tool step deadline.")
    deadline_poll_s: float = Field(0.2, gt=0, description="How often the deadline timer looks.")
    state_ttl_s: int = Field(86_400, gt=0, description="How long finished request state is kept.")
    events_max_age_s: int = Field(3_600, gt=0, description="How long caller events are replayable.")
    sweep_interval_s: float = Field(
        300.0, gt=0, description="How often the orchestrator sweeps orphaned work-queue messages."
    )
    idempotency_ttl_s: int = Field(
        86_400, gt=0, description="How long an Idempotency-Key is remembered."
    )

    # Conversations and memory
    session_max_turns: int = Field(
        50, ge=1, le=1000, description="Turns a session keeps; the oldest go first."
    )
    session_ttl_s: int = Field(
        7 * 86_400,
        gt=0,
        description="How long a turn is kept, and a session after its latest turn.",
    )
    session_context_turns: int = Field(
        3, ge=0, le=20, description="Earlier turns a follow-up is made standalone from."
    )
    memory_scope: Literal["session", "tenant"] = Field(
        "session",
        description="What semantic memory is shared by: one session (the default), or every "
        "session of a tenant. A memory is never recalled outside its scope.",
    )
    memory_ttl_s: int = Field(
        30 * 86_400, gt=0, description="How long a scope's memory index lives after its last write."
    )
    memory_min_score: float = Field(
        0.35,
        ge=-1.0,
        le=1.0,
        description="Cosine similarity below which a memory is not recalled for a question.",
    )

    # Research mode
    research_max_children: int = Field(
        4,
        ge=1,
        le=8,
        description="Sub-questions a research request answers at most (its breadth); each is a "
        "child request.",
    )
    research_max_depth: int = Field(
        1,
        ge=1,
        le=3,
        description="Levels of research: 1 = children are ordinary requests; 2 = a child whose "
        "sub-question has parts of its own is researched in turn (its children ordinary).",
    )
    research_timeout_s: float = Field(
        300.0, gt=0, description="Whole-request deadline of a research request."
    )
    research_wait_s: float = Field(
        180.0,
        gt=0,
        description="How long a research request waits for its children; those still running "
        "then are cancelled and reported, and the report is written without them.",
    )
    plan_timeout_s: float = Field(15.0, gt=0, description="Research planning step deadline.")

    # Consumers
    ack_wait_s: float = Field(30.0, gt=0, description="Redelivery after a worker goes silent.")
    publish_retry_s: float = Field(
        20.0,
        gt=0,
        description="How long a publish keeps retrying a missing ack or a stream with no leader "
        "(a cluster elects a new one within seconds of losing a node); then it fails.",
    )
    max_deliver: int = Field(5, ge=1, description="Deliveries before a message is dead-lettered.")
    ingest_requeues: int = Field(
        2,
        ge=0,
        le=10,
        description="Times an ingest document whose every delivery died unacknowledged (its "
        "process killed or hung, never an error it raised) is published afresh before it is "
        "dead-lettered: under repeated kills a healthy document must not be lost.",
    )
    retry_delay_s: float = Field(1.0, ge=0, description="Nak delay for transient failures.")
    worker_concurrency: int = Field(4, ge=1, description="Messages one subscriber handles at once.")
    phase_start_after_ms: float = Field(
        100.0,
        ge=0,
        description="A step sends its in_progress event only once it has run this long (its "
        "completed or failed event carries its start either way); 0 = every step, at once.",
    )
    max_ack_pending: int = Field(
        256,
        ge=1,
        description="Messages a step's consumer hands out unacknowledged, across all its "
        "replicas; raise it with the replicas (a message held past ack_wait_s is redelivered).",
    )

    # Retrieval
    default_top_k: int = Field(8, ge=1, le=50, description="Chunks given to generation.")
    graph_bridge: bool = Field(
        True, description="Fusion adds documents about the best chunks' entities (multi-hop)."
    )
    channel_top_k: int = Field(20, ge=1, le=200, description="Chunks each channel returns.")
    saga_state_cache: int = Field(
        4096,
        ge=0,
        description="Running requests whose last committed state an orchestrator process keeps "
        "in memory, so a transition skips reading and parsing it (the commit still checks its "
        "version); 0 = read every time.",
    )
    search_batch: bool = Field(
        True,
        description="One search command per query for all its document channels, run side by "
        "side by one search worker (false: a command per channel, for deployments that serve "
        "channels from different processes).",
    )
    fuse_with_search: bool = Field(
        True,
        description="When one search command holds all an attempt searches, its worker fuses "
        "the rankings too and answers with the fused list: one hop fewer a request (false: "
        "fusion is always a step of its own, for deployments that run it in other processes).",
    )
    classify_with_search: bool = Field(
        True,
        description="A question outside a conversation, asked for an answer, is classified by "
        "the search worker in its first search command instead of by a classify step: one hop "
        "and one saga transition fewer a request. The search workers load the intent model "
        "then. Needs RAGBUS_SEARCH_BATCH and RAGBUS_FUSE_WITH_SEARCH (false: a classify step "
        "for every question, for deployments that run the classifier in other processes).",
    )
    submit_in_process: bool = Field(
        True,
        description="Where the API runs in the orchestrator's process (`ragbus up`), it hands "
        "a question to the saga in that process, which commits its first step and sends its "
        "first command, instead of publishing rag.query.submitted for the saga to consume: one "
        "message and one Redis read fewer a request (false: always over the bus).",
    )
    fusion: Literal["convex", "rrf"] = Field(
        "convex",
        description="How the fuse step combines the channels: convex (each channel's scores, "
        "min-max normalised, weighted by the intent) or rrf (weighted reciprocal ranks).",
    )
    score_completion: bool = Field(
        True,
        description="With convex fusion, the vector and sparse channels each score the chunks "
        "the other found and they did not list (a search restricted to those ids), so fusion "
        "normalises and weighs every candidate by both text channels instead of counting 0 for "
        "a chunk one of them just missed (false: each channel's own list only).",
    )
    search_feedback: bool = Field(
        True,
        description="With convex fusion and BM25, the vector and sparse channels search again "
        "with what their first hits say (pseudo-relevance feedback: the query's embedding moved "
        "toward the three best chunks', BM25 with RM3's expanded terms), except for a question "
        "that names a particular document's title (one the collection does not mention as "
        "often as a generic entity); fusion then gives the graph channels weight 0 (false: the "
        "first search only, and the intent's weights for every question).",
    )
    rrf_k: int = Field(60, ge=1, description="Reciprocal rank fusion constant (fusion=rrf).")
    chunk_chars: int = Field(800, ge=100, le=16_000, description="Target chunk size in characters.")
    chunk_overlap_chars: int = Field(120, ge=0, description="Overlap between chunks.")
    critic_accept: float = Field(0.55, ge=0, le=1, description="Confidence the critic accepts.")
    encoder_path: Path | None = Field(
        None, description="Sentence-transformers model dir; unset = the bundled MiniLM."
    )
    encoder_precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto",
        description="Dense encoder arithmetic; auto = bf16 for ingestion's batches where the "
        "CPU has bf16 instructions, fp32 for queries, on a GPU and elsewhere.",
    )
    encoder_runtime: Literal["auto", "onnx", "torch"] = Field(
        "auto",
        description="Dense encoder runtime; auto = torch on a GPU or where it runs bf16 "
        "(ingestion's batches), ONNX Runtime (fp32) elsewhere, queries included.",
    )
    encoder_threads: int = Field(
        0,
        ge=0,
        le=64,
        description="Encoder intra-op threads; 0 = this process's share of the cores "
        "(cores ÷ RAGBUS_HOST_PROCESSES), at most 4.",
    )
    blas_threads: int = Field(
        1,
        ge=0,
        le=64,
        description="Threads of numpy's BLAS (OpenBLAS) in a serving process; 0 = the "
        "library's default (a thread per core, spinning between calls).",
    )
    host_processes: int = Field(
        0,
        ge=0,
        le=256,
        description="ragbus processes (or `ragbus up` stacks) sharing this machine's cores; "
        "each sizes its thread pools to its share. 0 = one: a `ragbus up` stack counts as one, "
        "its processes take turns (it passes the setting to its child).",
    )
    background_process: bool = Field(
        True,
        description="Run ingestion's encoder passes and community detection in a niced child "
        "process, off the query path; false = threads of the same process.",
    )
    bge_m3_path: Path | None = Field(
        None,
        description="BGE-M3 model dir (FlagEmbedding); set = dense 1024-d + learned sparse "
        "instead of MiniLM + BM25.",
    )
    reranker_path: Path | None = Field(
        None, description="Cross-encoder dir (FlagEmbedding reranker); set = rerank fused chunks."
    )
    rerank_top_n: int = Field(
        30, ge=1, le=200, description="Fused chunks the reranker rescores (when one is set)."
    )
    nli_path: Path | None = Field(
        None,
        description="Local NLI cross-encoder (transformers sequence classification with an "
        "entailment label); set = the critic scores support by entailment.",
    )

    # Files and parsing
    max_file_bytes: int = Field(
        100 * 1024 * 1024,
        ge=1,
        le=MAX_FILE_BYTES,
        description="The largest file an upload (`POST /v1/documents` as multipart, `ragbus "
        "ingest`) may carry; a batch with a larger one is refused whole (413).",
    )
    parse_timeout_s: float = Field(
        120.0,
        gt=0,
        description="Wall-clock limit of parsing one file (OCR included); a parser that runs "
        "longer is killed and the file dead-lettered.",
    )
    parse_memory_mb: int = Field(
        1536,
        ge=64,
        description="Address space a parser process may use (RLIMIT_AS); one that needs more "
        "is killed and its file dead-lettered.",
    )
    max_pages: int = Field(
        2000,
        ge=1,
        le=MAX_PAGES,
        description="Pages (or slides, or images) a file may have; one with more is refused.",
    )
    ocr_dpi: int = Field(
        200,
        ge=50,
        le=600,
        description="Resolution scanned pages are rendered at for OCR.",
    )

    # Generation (LLM) and tools
    llm_base_url: str | None = Field(
        None,
        description="OpenAI-compatible endpoint (e.g. `http://127.0.0.1:8001/v1`); "
        "unset = extractive generation.",
    )
    llm_model: str = Field("gpt-4o-mini", description="Model name sent to the LLM endpoint.")
    llm_api_key: str | None = Field(None, description="API key for the LLM endpoint.")
    llm_timeout_s: float = Field(
        30.0, gt=0, description="LLM connect / first-byte / between-chunk timeout."
    )
    llm_max_retries: int = Field(
        2, ge=0, le=10, description="LLM retries on transient errors, before the first token."
    )
    llm_retry_backoff_s: float = Field(
        0.5, ge=0, description="LLM retry back-off base (exponential)."
    )
    llm_temperature: float = Field(0.1, ge=0, le=2, description="LLM sampling temperature.")
    llm_max_tokens: int = Field(1024, ge=16, description="LLM answer length limit in tokens.")
    llm_entities: bool = Field(
        True, description="Use the LLM for entity extraction when RAGBUS_LLM_BASE_URL is set."
    )
    llm_summaries: bool = Field(
        True,
        description="Let the LLM write community summaries when RAGBUS_LLM_BASE_URL is set.",
    )
    sandbox_timeout_s: float = Field(
        10.0, gt=0, description="Python tool: wall-clock limit (the process group is killed)."
    )
    sandbox_cpu_s: int = Field(5, ge=1, description="Python tool: CPU-seconds limit.")
    sandbox_memory_mb: int = Field(
        256, ge=32, description="Python tool: address-space limit (RLIMIT_AS)."
    )
    sandbox_max_procs: int = Field(
        16, ge=1, description="Python tool: process limit (RLIMIT_NPROC)."
    )
    sandbox_isolation: str = Field(
        "auto",
        description="Python tool isolation: `auto` (bwrap, else `unshare -rn`, else the tool "
        "refuses), `bwrap`, `unshare` or `none`.",
    )

    # Observability
    log_level: str = Field("INFO", description="Log level.")
    log_json: bool = Field(True, description="JSON logs (false: human-readable console).")

    @model_validator(mode="after")
    def _steps_end_before_the_request(self) -> Settings:
        """A step whose deadline outlasts the request's can never degrade: the request times
        out first, whatever the step's fallback. Refused at start-up, by name."""
        too_long = [
            f"RAGBUS_{name.upper()}={getattr(self, name):g}"
            for name in STEP_TIMEOUTS
            if getattr(self, name) >= self.request_timeout_s
        ]
        if too_long:
            raise ValueError(
                f"step deadlines must be shorter than RAGBUS_REQUEST_TIMEOUT_S="
                f"{self.request_timeout_s:g}: {', '.join(too_long)}"
            )
        if self.research_wait_s >= self.research_timeout_s:
            raise ValueError(
                f"RAGBUS_RESEARCH_WAIT_S={self.research_wait_s:g} must be shorter than "
                f"RAGBUS_RESEARCH_TIMEOUT_S={self.research_timeout_s:g}: the report is written "
                "after the wait"
            )
        return self

    @model_validator(mode="after")
    def _token_mode_has_a_token(self) -> Settings:
        if self.auth_mode == "token" and not self.api_token:
            raise ValueError("RAGBUS_AUTH_MODE=token needs RAGBUS_API_TOKEN")
        return self

    @field_validator("auth_mode", "nats_creds", "nats_trust_dir", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """`RAGBUS_AUTH_MODE=` (docker-compose's `${VAR:-}`) means unset, not a value."""
        return None if value == "" else value

    @field_validator("nats_url")
    @classmethod
    def _nats_urls_parse(cls, value: str) -> str:
        nats_servers(value)
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
    def auth(self) -> Literal["none", "token", "tenants"]:
        """The auth mode in force (RAGBUS_AUTH_MODE, or what RAGBUS_API_TOKEN implies)."""
        if self.auth_mode is not None:
            return self.auth_mode
        return "token" if self.api_token else "none"

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
        return self.data_dir / "models"

    @property
    def graph_path(self) -> Path:
        return self.data_dir / "graph"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
