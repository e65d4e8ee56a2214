"""The corpora of `ragbus bench-scale`: about 10k, 100k and 300k chunks built from one ingested
namespace (`bench.scale` serves and measures them).

Why the corpora are not ingested
--------------------------------
Ingestion is bounded by the dense encoder: about 20 chunks a second on this 2-core machine
(README, Evaluation), so 300k chunks would cost over four hours of MiniLM forward passes alone,
and the benchmark is about the stores and the query path, not the encoder. So `build_corpus`
makes the bigger corpora from one namespace that was ingested for real (NFCorpus: 3,633
documents, 9,299 chunks, by `ragbus eval --beir ../shared/data/nfcorpus`), writing stored
points straight into a fresh data directory, in the stores' own formats, through their public
write paths (`VectorStore.write_points`, `GraphStore.upsert_document`).

How they are built
------------------
Copy 0 is the source namespace as it is: the same ids, payloads, dense, sparse and sentence
vectors, entities and mentions. Copies 1..n-1 of every document, until the target is reached:

* ids: the document `<id>~c<k>`, its chunks `chunk_id_for(namespace, "<id>~c<k>", index)`,
  the title `<title> ~copy<k>` (a suffix no query contains; it adds that one term to the
  chunk's sparse vector, as ingestion would, and keeps the title's own head for the bridge);
* text: inside each stored sentence span the first and last words stay, so sentence
  boundaries and spans still hold; every other word is dropped with probability 0.10, then
  neighbouring words swap with probability 0.05; a chunk that came out unchanged loses one word
  (seeded per seed, copy and chunk: `random.Random(f"{seed}/{k}/{chunk_id}")`);
* sparse: BM25 of the perturbed chunk's `embedding_text` (title, heading, text), by the same
  `Bm25Sparse` ingestion uses;
* dense: unit(original + N(0, σ²·I)) with σ = sqrt((1/0.95² − 1) / dim), so the cosine to the
  original is about 0.95 (measured, and recorded in `scale.json`); the sentence vectors are
  perturbed the same way, one draw per sentence, and kept aligned with the new spans;
* graph: the same entities in the same chunks, except that half of the entities (chosen per
  entity and copy by a seeded hash, so a copy renames an entity in all its documents) are
  `<name> copy<k>` in that copy. The entity count grows with the corpus, as a bigger and more
  diverse corpus's would, and the other half gather the mentions of every copy, as the common
  entities of a bigger corpus do. Communities are detected once, at the end, and their
  summaries embedded with the project's encoder, as an ingest job's end does; timed on their
  own, since Louvain over the whole co-occurrence graph is corpus-wide Python work (seconds
  at 3k chunks already).

The source belongs to the `ragbus up` that ingested it, so only copies are opened: its Edge shard
and graph directory are copied to a temporary directory first (copy at a quiet moment: a shard
copied in the middle of a write is as torn as the write). The intent model and the encoder's
ONNX export are copied too, so the stack that serves the corpus classifies and encodes as the
source's did without training or exporting anything.

`measure` serves such a data directory with `ragbus up` in a child process, on its own
nats-server and redis-server (free ports, temporary storage), and drives it with `ragbus bench`'s
closed loop (`bench.load.run_bench`); `table` renders the rows for the README.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from contracts.models import RetrievedChunk
from infra.retrieval.chunking import Chunk, chunk_id_for
from infra.retrieval.entities import Entity, EntityKind
from infra.retrieval.graph.embedded import EmbeddedGraphStore
from infra.retrieval.graph.model import Embed
from infra.retrieval.lexical import SparseVec
from infra.retrieval.sparse import Bm25Sparse
from infra.retrieval.vectors.base import DENSE, SPARSE, StoredPoint
from infra.retrieval.vectors.codec import sentences_of
from infra.retrieval.vectors.edge import CONFIG_FILE, EdgeVectorStore, _stored_kind
from infra.settings import Settings
from workers.classify.model_meta import MODEL_DIR_NAME

TARGET_COSINE = 0.95
"""Cosine of a copy's dense (and sentence) vector to the original's, in expectation."""
DROP_RATE = 0.10
"""Share of a sentence's inner words a copy drops."""
SWAP_RATE = 0.05
"""Chance that a kept inner word swaps places with the next one."""
RENAME_SHARE = 0.5
"""Share of the entities a copy renames (`<name> copy<k>`); the rest are shared by all copies."""
WRITE_BATCH = 1024
"""Points prepared before they are written (the vector store splits them further)."""
READ_BATCH = 256
SCALE_FILE = "scale.json"
STACK_LOG = "bench-scale-stack.log"

Progress = Callable[[str, int, int], None]
"""`progress(stage, done, total)`. Stages, in order: `read` (source points read), `write`
(chunks written to both stores, of the target), `optimize` and `communities` (0 of 1 when
they start, 1 of 1 when they end)."""

HOW = (
    "Copy 0 is the ingested source namespace unchanged. Every further copy k of a document gets "
    "the id <id>~c<k> (chunk ids by chunk_id_for), the title suffix ' ~copy<k>', and a perturbed "
    f"text: inside each sentence the first and last words stay, every other word is dropped "
    f"with probability {DROP_RATE:g} and neighbouring words swap with probability {SWAP_RATE:g} "
    "(seeded per copy and chunk; a chunk left unchanged loses one word). Its sparse vector is "
    "recomputed from the perturbed text with the BM25 encoder ingestion uses; its dense vector is "
    f"unit(original + N(0, sigma^2 I)) with sigma chosen for a cosine of {TARGET_COSINE:g} to the "
    "original, and its sentence vectors are perturbed the same way and re-aligned with the new "
    "sentence spans. In the graph each copy mentions the same entities in the same chunks, but "
    f"{RENAME_SHARE:.0%} of the entities (chosen per entity and copy by a seeded hash) are renamed "
    "'<name> copy<k>' in that copy, so the entity count grows with the corpus while the other "
    "half gather mentions from every copy; communities are detected once at the end."
)


# =========================================================================== perturbation


def noise_sigma(dim: int, cosine: float = TARGET_COSINE) -> float:
    """σ of the Gaussian noise that leaves a unit vector at `cosine` to itself once the sum is
    normalised again: |noise|² ≈ dim·σ² and cos ≈ 1 / sqrt(1 + dim·σ²)."""
    if not 0 < cosine < 1:
        raise ValueError("cosine must be in (0, 1)")
    return math.sqrt((1 / cosine**2 - 1) / dim)


def perturb_vectors(
    rows: np.ndarray, sigma: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Unit rows of `rows` + N(0, σ²), and each one's cosine to its original row."""
    original = np.asarray(rows, dtype=np.float32).reshape(len(rows), -1)
    noisy = original + rng.normal(0.0, sigma, original.shape).astype(np.float32)
    noisy /= np.maximum(np.linalg.norm(noisy, axis=1, keepdims=True), 1e-12)
    norms = np.maximum(np.linalg.norm(original, axis=1), 1e-12)
    return noisy, np.einsum("ij,ij->i", noisy, original) / norms


def _perturb_words(words: list[str], rng: random.Random) -> list[str]:
    if len(words) < 3:
        return words
    kept = [word for word in words[1:-1] if rng.random() >= DROP_RATE]
    at = 0
    while at < len(kept) - 1:
        if rng.random() < SWAP_RATE:
            kept[at], kept[at + 1] = kept[at + 1], kept[at]
            at += 2
        else:
            at += 1
    return [words[0], *kept, words[-1]]


def perturb_text(
    text: str, spans: Sequence[tuple[int, int]], rng: random.Random
) -> tuple[str, list[tuple[int, int]]]:
    """The text with words dropped and swapped inside each span (the stored sentence spans;
    none = the whole text as one), and the spans of the same sentences in the new text. What
    lies between spans is kept as it is."""
    units = list(spans) or ([(0, len(text))] if text.strip() else [])
    originals = [text[a:b].split() for a, b in units]
    changed = [_perturb_words(words, rng) for words in originals]
    if changed == originals:  # nothing happened: drop one inner word of the longest sentence
        longest = max(range(len(originals)), key=lambda i: len(originals[i]), default=None)
        if longest is not None and len(originals[longest]) >= 3:
            words = list(originals[longest])
            del words[rng.randrange(1, len(words) - 1)]
            changed[longest] = words
    pieces: list[str] = []
    new_spans: list[tuple[int, int]] = []
    at = 0
    size = 0
    for (start, end), words in zip(units, changed, strict=True):
        gap = text[at:start]
        sentence = " ".join(words)
        pieces += [gap, sentence]
        size += len(gap)
        new_spans.append((size, size + len(sentence)))
        size += len(sentence)
        at = end
    pieces.append(text[at:])
    return "".join(pieces), new_spans if spans else []


def copy_document_id(document_id: str, copy: int) -> str:
    return document_id if copy == 0 else f"{document_id}~c{copy}"


def copy_title(title: str, copy: int) -> str:
    return title if copy == 0 else f"{title} ~copy{copy}"


def renamed(norm: str, copy: int, seed: int) -> bool:
    """Whether copy `copy` renames the entity `norm` (the same answer in all its documents)."""
    if copy == 0:
        return False
    digest = hashlib.blake2b(f"{seed}/{copy}/{norm}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < RENAME_SHARE


def copy_entity(entity: Entity, copy: int, seed: int) -> Entity:
    if not renamed(entity.norm, copy, seed):
        return entity
    return Entity(f"{entity.name} copy{copy}", f"{entity.norm} copy{copy}", entity.kind)


# =========================================================================== the source


@dataclass
class SourcePoint:
    id: str
    payload: dict[str, Any]
    dense: np.ndarray
    sparse: SparseVec
    sentences: np.ndarray | None
    """One row per stored span, or None when the chunk was stored without them."""

    @property
    def index(self) -> int:
        return int(self.payload.get("index") or 0)

    @property
    def spans(self) -> list[tuple[int, int]]:
        return [(int(a), int(b)) for a, b in self.payload.get("spans") or []]

    def stored(self) -> StoredPoint:
        return StoredPoint(
            id=self.id,
            dense=self.dense.tolist(),
            sparse=(list(self.sparse[0]), list(self.sparse[1])),
            sentences=None if self.sentences is None else self.sentences.tolist(),
            payload=dict(self.payload),
        )


@dataclass
class SourceDocument:
    document_id: str
    title: str
    points: list[SourcePoint] = field(default_factory=list)
    entities: dict[str, list[Entity]] = field(default_factory=dict)
    """chunk id -> the entities ingestion found in it, in order."""


@dataclass
class Source:
    dim: int
    documents: list[SourceDocument]
    entities: int
    """Distinct entities of the namespace."""

    @property
    def chunks(self) -> int:
        return sum(len(doc.points) for doc in self.documents)


def _copy_dir(source: Path, target: Path) -> bool:
    if not source.is_dir():
        return False
    shutil.copytree(source, target)
    return True


def _read_vectors(
    shard_root: Path, namespace: str, progress: Progress
) -> tuple[int, list[SourcePoint]]:
    dim, idf = _stored_kind(shard_root / namespace)
    if dim is None:
        raise ValueError(f"{shard_root / namespace} records no dense vector size")
    if not idf:
        raise ValueError(
            f"{shard_root / namespace} holds learned (BGE-M3) sparse vectors: a perturbed copy "
            "would need the model to remake them; only BM25 namespaces can be scaled this way"
        )
    store = EdgeVectorStore(shard_root, dim, sparse_idf=True)
    try:
        total = store.count(namespace)
        records = []
        for record in store.iter_points(namespace, READ_BATCH):
            records.append(record)
            if len(records) % (READ_BATCH * 8) == 0:
                progress("read", len(records), total)
        points: list[SourcePoint] = []
        for start in range(0, len(records), READ_BATCH):
            batch = records[start : start + READ_BATCH]
            refs = [
                RetrievedChunk(
                    chunk_id=r.id,
                    document_id=str(r.payload.get("document_id", "")),
                    namespace=namespace,
                )
                for r in batch
            ]
            # the sentence vectors: `iter_points` reads dense and sparse only, hydration all
            hydrated = {chunk.chunk_id: chunk for chunk in store.hydrate(refs)}
            for record in batch:
                found = hydrated.get(record.id)
                vectors = found.vectors if found is not None else None
                sentences = None
                if vectors is not None and vectors.spans:
                    sentences = sentences_of(vectors)
                indices, values = record.vectors[SPARSE]
                points.append(
                    SourcePoint(
                        id=record.id,
                        payload=dict(record.payload),
                        dense=np.asarray(record.vectors[DENSE], dtype=np.float32),
                        sparse=(list(indices), list(values)),
                        sentences=sentences,
                    )
                )
        progress("read", len(points), total)
        return dim, points
    finally:
        store.close()


async def _read_graph(graph_dir: Path, namespace: str) -> list[dict[str, Any]]:
    """The namespace's document records as the embedded store persists them, from a copy that
    is loaded (journal replayed) and closed (journal folded into the snapshot) first."""
    store = EmbeddedGraphStore(graph_dir)
    await asyncio.to_thread(store.load)
    await store.aclose()
    data = read_json(graph_dir / EmbeddedGraphStore.SNAPSHOT) or {}
    return [record for record in data.get("documents", []) if record["namespace"] == namespace]


async def read_source(
    source_data_dir: Path, namespace: str, work_dir: Path, progress: Progress
) -> Source:
    """Copy the namespace's Edge shard and the graph directory into `work_dir` and read the
    copies: the points grouped by document (documents by id, chunks by index), each chunk's
    entities from the graph. The source itself is only read by the copying."""
    source = Settings(data_dir=source_data_dir)
    shard = source.vectors_path / namespace
    if not (shard / CONFIG_FILE).exists():
        raise FileNotFoundError(f"no vector shard for namespace {namespace!r} in {shard}")
    if not source.graph_path.is_dir():
        raise FileNotFoundError(f"no embedded graph in {source.graph_path}")
    await asyncio.to_thread(shutil.copytree, shard, work_dir / "vectors" / namespace)
    await asyncio.to_thread(shutil.copytree, source.graph_path, work_dir / "graph")
    dim, points = await asyncio.to_thread(_read_vectors, work_dir / "vectors", namespace, progress)
    records = await _read_graph(work_dir / "graph", namespace)
    by_document: dict[str, SourceDocument] = {}
    for point in points:
        document_id = str(point.payload.get("document_id", ""))
        doc = by_document.get(document_id)
        if doc is None:
            title = str(point.payload.get("title", ""))
            doc = by_document[document_id] = SourceDocument(document_id, title)
        doc.points.append(point)
    norms: set[str] = set()
    for record in records:
        doc = by_document.get(record["document_id"])
        for chunk, entities in zip(record["chunks"], record["entities"], strict=True):
            found = [Entity(e["name"], e["norm"], cast(EntityKind, e["kind"])) for e in entities]
            norms.update(e.norm for e in found)
            if doc is not None:
                doc.entities[chunk["chunk_id"]] = found
    documents = sorted(by_document.values(), key=lambda d: d.document_id)
    for doc in documents:
        doc.points.sort(key=lambda p: p.index)
    return Source(dim, documents, len(norms))


# =========================================================================== the build


GraphDocument = tuple[str, str, list[Chunk], list[list[Entity]]]
"""(document id, title, chunks, each chunk's entities): one `upsert_document`."""


@dataclass
class _Pending:
    points: list[StoredPoint] = field(default_factory=list)
    documents: list[GraphDocument] = field(default_factory=list)


@dataclass
class _Tally:
    cosine_sum: float = 0.0
    cosine_min: float = 1.0
    perturbed: int = 0
    prepare_s: float = 0.0
    vectors_s: float = 0.0
    graph_s: float = 0.0
    write_s: float = 0.0
    """Wall time of the writes: the two stores' overlap."""


def _copy_of(
    doc: SourceDocument,
    copy: int,
    namespace: str,
    seed: int,
    sigma: float,
    rng: np.random.Generator,
    sparse: Bm25Sparse,
    tally: _Tally,
) -> tuple[list[StoredPoint], list[Chunk], list[list[Entity]]]:
    """Copy `copy` of a document: its points, and its chunks and entities for the graph."""
    document_id = copy_document_id(doc.document_id, copy)
    title = copy_title(doc.title, copy)
    chunks: list[Chunk] = []
    entities: list[list[Entity]] = []
    spans: list[list[tuple[int, int]]] = []
    for point in doc.points:
        payload = point.payload
        text = str(payload.get("text", ""))
        if copy:
            chunk_rng = random.Random(f"{seed}/{copy}/{point.id}")
            text, new_spans = perturb_text(text, point.spans, chunk_rng)
        else:
            new_spans = point.spans
        chunk_id = chunk_id_for(namespace, document_id, point.index) if copy else point.id
        chunks.append(
            Chunk(
                chunk_id=chunk_id,
                document_id=document_id,
                namespace=namespace,
                title=title,
                source=str(payload.get("source", "")),
                index=point.index,
                text=text,
                heading=str(payload.get("heading", "")),
            )
        )
        spans.append(new_spans)
        found = doc.entities.get(point.id, [])
        entities.append([copy_entity(e, copy, seed) for e in found] if copy else list(found))
    if copy == 0:
        return [point.stored() for point in doc.points], chunks, entities
    sparse_vectors = sparse.documents([chunk.embedding_text for chunk in chunks])
    dense, cosines = perturb_vectors(np.stack([p.dense for p in doc.points]), sigma, rng)
    tally.cosine_sum += float(cosines.sum())
    tally.cosine_min = min(tally.cosine_min, float(cosines.min()))
    tally.perturbed += len(cosines)
    points: list[StoredPoint] = []
    for point, chunk, vector, sparse_vec, chunk_spans in zip(
        doc.points, chunks, dense, sparse_vectors, spans, strict=True
    ):
        sentences = None
        if point.sentences is not None and len(point.sentences):
            sentences = perturb_vectors(point.sentences, sigma, rng)[0].tolist()
        content_hash = hashlib.sha256(
            f"{point.payload.get('content_hash', '')}~c{copy}".encode()
        ).hexdigest()
        payload = {
            **point.payload,
            "chunk_id": chunk.chunk_id,
            "document_id": document_id,
            "title": title,
            "text": chunk.text,
            "content_hash": content_hash,
            "spans": [[a, b] for a, b in chunk_spans],
        }
        points.append(
            StoredPoint(
                id=chunk.chunk_id,
                dense=vector.tolist(),
                sparse=(list(sparse_vec[0]), list(sparse_vec[1])),
                sentences=sentences,
                payload=payload,
            )
        )
    return points, chunks, entities


def _fresh_out_dir(out_data_dir: Path, source_data_dir: Path) -> None:
    """Make the output data directory, refusing the source and anything already in use."""
    if out_data_dir.resolve() == source_data_dir.resolve():
        raise ValueError("the corpus must be written to another data directory than the source")
    if out_data_dir.exists() and any(out_data_dir.iterdir()):
        raise FileExistsError(f"{out_data_dir} is not empty: the corpus needs a fresh data dir")
    out_data_dir.mkdir(parents=True, exist_ok=True)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _no_progress(stage: str, done: int, total: int) -> None:
    return None


async def abuild_corpus(
    source_data_dir: Path,
    namespace: str,
    target_chunks: int,
    out_data_dir: Path,
    *,
    seed: int = 0,
    progress: Progress | None = None,
    embed: Embed | None = None,
    communities: bool = True,
) -> dict[str, Any]:
    """`build_corpus` for a caller that already runs an event loop."""
    if target_chunks < 1:
        raise ValueError("target_chunks must be at least 1")
    report = progress or _no_progress
    source_data_dir, out_data_dir = Path(source_data_dir), Path(out_data_dir)
    _fresh_out_dir(out_data_dir, source_data_dir)
    started = time.perf_counter()
    out = Settings(data_dir=out_data_dir)
    with tempfile.TemporaryDirectory(prefix="ragbus-scale-source-") as tmp:
        source = await read_source(source_data_dir, namespace, Path(tmp), report)
    if not source.documents:
        raise ValueError(f"namespace {namespace!r} of {source_data_dir} has no points")
    read_s = time.perf_counter() - started
    source_settings = Settings(data_dir=source_data_dir)
    intent_model = await asyncio.to_thread(
        _copy_dir, source_data_dir / MODEL_DIR_NAME, out_data_dir / MODEL_DIR_NAME
    )
    encoder_models = await asyncio.to_thread(
        _copy_dir, source_settings.models_path, out.models_path
    )

    sigma = noise_sigma(source.dim)
    rng = np.random.default_rng(seed)
    sparse = Bm25Sparse()
    vectors = EdgeVectorStore(out.vectors_path, source.dim, sparse_idf=True)
    graph = EmbeddedGraphStore(out.graph_path)
    await asyncio.to_thread(graph.load)
    tally = _Tally()
    pending = _Pending()
    written = documents = copies = 0

    async def write_vectors(points: list[StoredPoint]) -> None:
        at = time.perf_counter()
        await asyncio.to_thread(vectors.write_points, namespace, points)
        tally.vectors_s += time.perf_counter() - at

    async def write_graph(batch: list[GraphDocument]) -> None:
        at = time.perf_counter()
        for document_id, title, chunks, entities in batch:
            await graph.upsert_document(namespace, document_id, title, chunks, entities)
        tally.graph_s += time.perf_counter() - at

    async def write(points: list[StoredPoint], batch: list[GraphDocument]) -> None:
        nonlocal written
        at = time.perf_counter()
        await asyncio.gather(write_vectors(points), write_graph(batch))
        tally.write_s += time.perf_counter() - at
        written += len(points)
        report("write", written, max(target_chunks, written))

    writing: asyncio.Task[None] | None = None

    async def flush() -> None:
        """Hand the pending batch to a writing task once the previous one is done. Both stores
        are written at once (the graph mostly waits for its journal's fsync, one per document,
        while the vector store works in its own thread), and the next batch is prepared
        meanwhile: the preparing loop yields after every document."""
        nonlocal writing
        if writing is not None:
            await writing
        points, batch = list(pending.points), list(pending.documents)
        pending.points.clear()
        pending.documents.clear()
        writing = asyncio.create_task(write(points, batch))

    optimize_s = communities_s = 0.0
    found_communities: int | None = None
    try:
        prepared = 0
        copy = 0
        while prepared < target_chunks:
            copies = copy + 1
            for doc in source.documents:
                if prepared >= target_chunks:
                    break
                at = time.perf_counter()
                points, chunks, entities = _copy_of(
                    doc, copy, namespace, seed, sigma, rng, sparse, tally
                )
                tally.prepare_s += time.perf_counter() - at
                document_id = copy_document_id(doc.document_id, copy)
                pending.points.extend(points)
                pending.documents.append((document_id, chunks[0].title, chunks, entities))
                prepared += len(points)
                documents += 1
                if len(pending.points) >= WRITE_BATCH:
                    await flush()
                await asyncio.sleep(0)  # let the writing task go on
            copy += 1
        if pending.points:
            await flush()
        if writing is not None:
            await writing

        report("optimize", 0, 1)
        at = time.perf_counter()
        await asyncio.to_thread(vectors.optimize)
        optimize_s = time.perf_counter() - at
        report("optimize", 1, 1)

        if communities:
            report("communities", 0, 1)
            at = time.perf_counter()
            if embed is None:
                embed = await _project_embed(out, source.dim)
            found_communities = await graph.recompute_communities(embed=embed)
            communities_s = time.perf_counter() - at
            report("communities", 1, 1)
        stats = await graph.stats()
    finally:
        if writing is not None and not writing.done():  # failed while preparing: stop writing
            writing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writing
        await asyncio.to_thread(vectors.close)
        await graph.aclose()

    result: dict[str, Any] = {
        "namespace": namespace,
        "source_data_dir": str(source_data_dir),
        "source_chunks": source.chunks,
        "source_documents": len(source.documents),
        "source_entities": source.entities,
        "target_chunks": target_chunks,
        "chunks": written,
        "documents": documents,
        "entities": stats["entities"],
        "mentions": stats["mentions"],
        "communities": found_communities,
        "copies": copies,
        "seed": seed,
        "seconds": round(time.perf_counter() - started, 3),
        "timings_s": {
            "read_source": round(read_s, 3),
            "prepare": round(tally.prepare_s, 3),
            "write": round(tally.write_s, 3),
            "vectors_write": round(tally.vectors_s, 3),
            "graph_write": round(tally.graph_s, 3),
            "vectors_optimize": round(optimize_s, 3),
            "communities": round(communities_s, 3),
        },
        "dense_noise_sigma": round(sigma, 6),
        "mean_cosine_to_original": (
            round(tally.cosine_sum / tally.perturbed, 4) if tally.perturbed else None
        ),
        "min_cosine_to_original": round(tally.cosine_min, 4) if tally.perturbed else None,
        "sentence_vectors": "perturbed like the dense vector, aligned with the new spans",
        "intent_model_copied": intent_model,
        "encoder_export_copied": encoder_models,
        "how": HOW,
    }
    _write_json(out_data_dir / SCALE_FILE, result)
    return result


async def _project_embed(settings: Settings, dim: int) -> Embed:
    """The dense encoder `ragbus up` loads for this data directory (its ONNX export copied)."""
    from infra.retrieval.encoder import load_encoder

    encoder = await asyncio.to_thread(load_encoder, settings)
    if encoder.dim != dim:
        raise ValueError(f"the configured encoder makes dim {encoder.dim}, the corpus has {dim}")
    return encoder.aencode


def build_corpus(
    source_data_dir: Path,
    namespace: str,
    target_chunks: int,
    out_data_dir: Path,
    *,
    seed: int = 0,
    progress: Progress | None = None,
    embed: Embed | None = None,
    communities: bool = True,
) -> dict[str, Any]:
    """Write a corpus of about `target_chunks` chunks (whole documents: at most one document
    more) into the fresh data directory `out_data_dir`, namespace `namespace`, from the same
    namespace of `source_data_dir`, which is only read through copies; see the module
    docstring for how. Returns the build's report, also written to `out_data_dir/scale.json`.

    `embed` embeds the community summaries (default: the project's dense encoder, loaded as
    `ragbus up` would load it for `out_data_dir`); `communities=False` leaves them to the
    stack's first global search (then without summary vectors)."""
    return asyncio.run(
        abuild_corpus(
            source_data_dir,
            namespace,
            target_chunks,
            out_data_dir,
            seed=seed,
            progress=progress,
            embed=embed,
            communities=communities,
        )
    )
