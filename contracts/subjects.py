"""Subject names and stream layout. Builders validate ids so no wildcard reaches a subject."""

from __future__ import annotations

from typing import Final

from contracts.enums import Channel, Step
from contracts.envelope import is_valid_request_id
from contracts.tenancy import DEFAULT_TENANT, is_valid_tenant

# Streams
STREAM_QUERIES: Final = "RAG_QUERIES"
STREAM_CMD: Final = "RAG_CMD"
STREAM_RES: Final = "RAG_RES"
STREAM_EVENTS: Final = "RAG_EVENTS"
STREAM_INGEST: Final = "RAG_INGEST"
STREAM_INGEST_EVENTS: Final = "RAG_INGEST_EVENTS"
STREAM_DLQ: Final = "RAG_DLQ"
STREAM_ADVISORIES: Final = "RAG_ADVISORIES"

# Subjects
QUERY_SUBMITTED: Final = "rag.query.submitted"
QUERY_CANCEL: Final = "rag.query.cancel"
QUERY_CHILD: Final = "rag.query.child"
"""A research request's child ended: its parent's saga takes the outcome."""
CMD_PREFIX: Final = "rag.cmd"
RES_PREFIX: Final = "rag.res"
EVENTS_PREFIX: Final = "rag.events"
INGEST_DOCS_PREFIX: Final = "rag.ingest.docs"
INGEST_EVENTS_PREFIX: Final = "rag.ingest.events"
INGEST_PARSE_PREFIX: Final = "rag.ingest.parse"
"""`rag.ingest.parse.<tenant>.<job>`: files to parse (`contracts.ingest.IngestFile`), one lane
a tenant (`worker-parse-<tenant>`), so that one tenant's files never queue behind another's.
`rag.ingest.parse.<job>`, what earlier releases sent, is served by `worker-parse`."""
FILES_BUCKET: Final = "RAG_FILES"
"""The JetStream object store the uploaded files wait in (and are kept in, as the originals)."""
SOURCES_SUBJECT: Final = "rag.cmd.sources"
"""Syncs of sources to run (`contracts.sources.SyncSource`), for the sources workers."""
SOURCES_BUCKET: Final = "RAG_SOURCES"
"""JetStream KV: what each source's syncs have seen (`infra.sources.state`)."""
BACKUP_STORES: Final = "rag.ctl.backup.stores"
"""A request (core NATS, no stream) to the process that owns the embedded stores: copy them,
at one point, into a directory (`contracts.backup.CopyStores`); `ragbus backup` sends it."""
STORES_VERSION: Final = "rag.ctl.stores.version"
"""A request (core NATS) to the process that owns the embedded stores: which writes they hold
now (`contracts.replicas.StoresVersion`); a search replica asks it to know when its copy is
behind."""
SEARCH_REPLICAS: Final = "rag.ctl.search.replicas"
"""Search replicas say here, every few seconds and after each new copy, which copy they serve
from (`contracts.replicas.ReplicaSeen`); the store owner hands commands only to one whose copy
holds every write (`infra.runtime.replica_hub`)."""
SEARCH_REPLICA_PREFIX: Final = "rag.ctl.search.replica"
"""`rag.ctl.search.replica.<replica>`: a search command handed to one replica (a request,
`contracts.replicas.ReplicaTask` -> `ReplicaAnswer`)."""
DLQ_PREFIX: Final = "rag.dlq"
INTAKE_PREFIX: Final = "rag.intake"
"""`rag.intake.<tenant>`: a tenant's document batches over the bus, in the service account
(`tenants` mode), where only that tenant's account can send them."""
TENANT_DOCUMENTS: Final = "rag.documents"
"""The subject a tenant's own NATS account sends its document batches to (a request); its
account imports it as `rag.intake.<tenant>` from the service account."""
MAX_DELIVERIES_ADVISORIES: Final = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>"
"""What nats-server publishes when a consumer stops redelivering a message it never got an
ack for (`$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>`)."""


def _checked(identifier: str) -> str:
    if not is_valid_request_id(identifier):
        raise ValueError(f"invalid id for a subject token: {identifier!r}")
    return identifier


def _step_suffix(step: Step, channel: Channel | None) -> str:
    if step is Step.SEARCH:
        if channel is None:
            raise ValueError("a search subject needs a channel")
        return f"search.{channel.value}"
    return step.value


def cmd_subject(step: Step, channel: Channel | None = None) -> str:
    return f"{CMD_PREFIX}.{_step_suffix(step, channel)}"


def res_subject(step: Step, channel: Channel | None = None) -> str:
    return f"{RES_PREFIX}.{_step_suffix(step, channel)}"


def result_subject_for(command_subject: str) -> str | None:
    """`rag.cmd.X` -> `rag.res.X`; None for anything that is not a command subject."""
    prefix = CMD_PREFIX + "."
    if not command_subject.startswith(prefix):
        return None
    return RES_PREFIX + "." + command_subject[len(prefix) :]


def events_subject(tenant: str, request_id: str) -> str:
    """A request's caller events: `rag.events.<tenant>.<request_id>`, so a tenant's NATS user
    may subscribe to `rag.events.<tenant>.>` and to nothing of anyone else's."""
    return f"{tenant_events_prefix(tenant)}.{_checked(request_id)}"


def tenant_events_prefix(tenant: str) -> str:
    if not is_valid_tenant(tenant):
        raise ValueError(f"invalid tenant for a subject token: {tenant!r}")
    return f"{EVENTS_PREFIX}.{tenant}"


def intake_subject(tenant: str) -> str:
    if not is_valid_tenant(tenant):
        raise ValueError(f"invalid tenant for a subject token: {tenant!r}")
    return f"{INTAKE_PREFIX}.{tenant}"


def ingest_docs_subject(job_id: str) -> str:
    return f"{INGEST_DOCS_PREFIX}.{_checked(job_id)}"


def ingest_parse_subject(job_id: str, tenant: str = DEFAULT_TENANT) -> str:
    if not is_valid_tenant(tenant):
        raise ValueError(f"invalid tenant for a subject token: {tenant!r}")
    return f"{INGEST_PARSE_PREFIX}.{tenant}.{_checked(job_id)}"


def parse_lane(subject: str) -> str | None:
    """The tenant whose lane a parse subject is in (`ingest_parse_subject`); "" for one of
    an earlier release's (`rag.ingest.parse.<job>`); None for any other subject."""
    prefix = f"{INGEST_PARSE_PREFIX}."
    if not subject.startswith(prefix):
        return None
    tokens = subject[len(prefix) :].split(".")
    if len(tokens) == 2 and is_valid_tenant(tokens[0]):
        return tokens[0]
    return "" if len(tokens) == 1 else None


def ingest_events_subject(job_id: str) -> str:
    return f"{INGEST_EVENTS_PREFIX}.{_checked(job_id)}"


def dlq_subject(original_subject: str) -> str:
    return f"{DLQ_PREFIX}.{original_subject}"


def search_replica_subject(replica: str) -> str:
    """Where one search replica takes the commands its store owner hands it."""
    return f"{SEARCH_REPLICA_PREFIX}.{_checked(replica)}"
