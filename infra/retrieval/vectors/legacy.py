"""Data directories from before Qdrant Edge: vectors kept by qdrant-client's local mode in
`<data dir>/qdrant`. ragbus no longer reads them; it refuses to start on them rather than
answer from an empty store, and `ragbus migrate-vectors` moves them over.

The migration keeps every point as it was (id, dense and sparse vectors, payload: the chunk's
text, document, content hash) and adds what the new store has that the old one had not: each
chunk's sentence spans and sentence vectors, encoded from the stored text. The old directory is
then renamed, not deleted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from infra.errors import StartupError
from infra.logging import get_logger
from infra.retrieval.encoder import Encoder
from infra.retrieval.sentences import clean_sentence, sentence_spans
from infra.retrieval.vectors.base import VectorStore
from infra.retrieval.vectors.points import DENSE, SPARSE, Record, StoredPoint
from infra.settings import Settings

log = get_logger(__name__)

META = "meta.json"
BATCH = 64


class UnmigratedVectors(StartupError):
    """The data directory's vectors are still in qdrant-client's local mode."""


def legacy_namespaces(settings: Settings) -> list[str]:
    """Namespaces whose vectors sit in the old local-mode directory, not yet migrated."""
    meta = settings.qdrant_path / META
    if not meta.exists():
        return []
    try:
        collections = json.loads(meta.read_text()).get("collections") or {}
    except (OSError, ValueError):
        return []
    prefix = settings.qdrant_collection_prefix
    return sorted(name.removeprefix(prefix) for name in collections if name.startswith(prefix))


def refuse_unmigrated(settings: Settings) -> None:
    found = legacy_namespaces(settings)
    if found:
        raise UnmigratedVectors(
            f"{settings.qdrant_path} holds vectors of namespaces {', '.join(found)} written by "
            "qdrant-client's local mode, which ragbus no longer reads (it now embeds Qdrant "
            "Edge). Run `ragbus migrate-vectors` to move them into "
            f"{settings.vectors_path} (nothing is re-ingested or lost; the old directory is "
            "kept, renamed), or point RAGBUS_DATA_DIR elsewhere to start afresh."
        )


@dataclass
class MigrationReport:
    namespaces: dict[str, int] = field(default_factory=dict)
    """Points moved per namespace."""
    sentences: int = 0
    seconds: float = 0.0
    kept_at: str | None = None


def _points(records: Iterable[Record], encoder: Encoder) -> list[StoredPoint]:
    """Stored points of old records, with sentence spans and vectors added."""
    batch = list(records)
    spans = [sentence_spans(str(r.payload.get("text", ""))) for r in batch]
    shown = [
        [clean_sentence(str(r.payload.get("text", ""))[a:b]) for a, b in found]
        for r, found in zip(batch, spans, strict=True)
    ]
    distinct = list(dict.fromkeys(t for texts in shown for t in texts if t))
    vectors = encoder.encode(distinct)
    row = {text: i for i, text in enumerate(distinct)}
    points = []
    for record, found, texts in zip(batch, spans, shown, strict=True):
        kept = [(span, text) for span, text in zip(found, texts, strict=True) if text]
        sentences = [vectors[row[text]].tolist() for _, text in kept] or None
        indices, values = record.vectors.get(SPARSE) or ([], [])
        points.append(
            StoredPoint(
                id=record.id,
                dense=[float(x) for x in np.asarray(record.vectors[DENSE], dtype=np.float32)],
                sparse=(list(indices), list(values)),
                sentences=sentences,
                payload={**record.payload, "spans": [[a, b] for (a, b), _ in kept]},
            )
        )
    return points


def migrate(
    settings: Settings,
    target: VectorStore,
    encoder: Encoder,
    progress: Callable[[str, int, int], None] | None = None,
) -> MigrationReport:
    """Move every legacy namespace into `target`, then rename the old directory."""
    from qdrant_client import QdrantClient

    from infra.retrieval.vectors.qdrant import QdrantVectorStore

    started = time.perf_counter()
    report = MigrationReport()
    namespaces = legacy_namespaces(settings)
    if not namespaces:
        return report
    client = QdrantClient(path=str(settings.qdrant_path))
    old = QdrantVectorStore(
        client, target.dim, settings.qdrant_collection_prefix, sparse_idf=target.sparse_idf
    )
    try:
        for namespace in namespaces:
            total = old.count(namespace)
            moved = 0
            pending: list[Record] = []
            for record in old.iter_points(namespace, batch=BATCH):
                pending.append(record)
                if len(pending) == BATCH:
                    moved += _write(target, namespace, pending, encoder, report)
                    pending = []
                    if progress:
                        progress(namespace, moved, total)
            if pending:
                moved += _write(target, namespace, pending, encoder, report)
            if progress:
                progress(namespace, moved, total)
            report.namespaces[namespace] = moved
            log.info("vectors_migrated", namespace=namespace, points=moved)
    finally:
        old.close()
    target.optimize()
    kept = settings.qdrant_path.with_name(
        f"{settings.qdrant_path.name}.migrated-{int(time.time())}"
    )
    settings.qdrant_path.rename(kept)
    report.kept_at = str(kept)
    report.seconds = round(time.perf_counter() - started, 2)
    return report


def _write(
    target: VectorStore,
    namespace: str,
    records: list[Record],
    encoder: Encoder,
    report: MigrationReport,
) -> int:
    points = _points(records, encoder)
    report.sentences += sum(len(p.sentences or ()) for p in points)
    target.write_points(namespace, points)
    return len(points)
