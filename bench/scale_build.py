"""The corpora of `ragbus bench-scale`: about 10k, 100k and 300k chunks built from one ingested
namespace (`bench.scale` serves and measures them).

Why the corpora are not ingested
--------------------------------
Ingestion is bounded by the dense encoder: about 20 chunks a second on this 2-core machine
(docs/benchmarks.md, Ingestion), so 300k chunks would cost over four hours of MiniLM forward
passes alone, and the benchmark is about the stores and the query path, not the encoder. So
`build_corpus` makes the bigger corpora from one namespace that was ingested for real (NFCorpus:
3,633 documents, 9,299 chunks, by `ragbus eval --beir ../shared/data/nfcorpus`), writing stored
points straight into a fresh data directory, in the stores' own formats, through their public
write paths (`VectorStore.write_points`, `GraphStore.upsert_document`).

How they are built
------------------
The source namespace is read through copies of its stores (`bench.scale_source`); copy 0 of
every document is written as it is, then perturbed copies 1..n-1 (`bench.scale_copies` says how
they differ) until the target is reached, both stores written at once while the next batch is
prepared; then the vector store is optimized and the graph's communities detected once. The
intent model and the encoder's ONNX export are copied too, so the stack that serves the corpus
classifies and encodes as the source's did without training or exporting anything.

`bench.scale` serves and measures each corpus.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.scale_copies import HOW, Tally, copy_document_id, copy_of, noise_sigma
from bench.scale_source import Progress, read_source
from engines.classify.model_meta import MODEL_DIR_NAME
from infra.retrieval.chunking import Chunk
from infra.retrieval.entities import Entity
from infra.retrieval.graph.embedded import EmbeddedGraphStore
from infra.retrieval.graph.model import Embed
from infra.retrieval.sparse import Bm25Sparse
from infra.retrieval.vectors.edge import EdgeVectorStore
from infra.retrieval.vectors.points import StoredPoint
from infra.settings import Settings

WRITE_BATCH = 1024
"""Points prepared before they are written (the vector store splits them further)."""
SCALE_FILE = "scale.json"
STACK_LOG = "bench-scale-stack.log"


GraphDocument = tuple[str, str, list[Chunk], list[list[Entity]]]
"""(document id, title, chunks, each chunk's entities): one `upsert_document`."""


@dataclass
class _Pending:
    points: list[StoredPoint] = field(default_factory=list)
    documents: list[GraphDocument] = field(default_factory=list)


def _copy_dir(source: Path, target: Path) -> bool:
    if not source.is_dir():
        return False
    shutil.copytree(source, target)
    return True


def _fresh_out_dir(out_data_dir: Path, source_data_dir: Path) -> None:
    """Make the output data directory, refusing the source and anything already in use."""
    if out_data_dir.resolve() == source_data_dir.resolve():
        raise ValueError("the corpus must be written to another data directory than the source")
    if out_data_dir.exists() and any(out_data_dir.iterdir()):
        raise FileExistsError(f"{out_data_dir} is not empty: the corpus needs a fresh data dir")
    out_data_dir.mkdir(parents=True, exist_ok=True)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


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
    if out.models_path == source_settings.models_path:  # one RAGBUS_MODELS_DIR serves both
        encoder_models = out.models_path.is_dir()
    else:
        encoder_models = await asyncio.to_thread(
            _copy_dir, source_settings.models_path, out.models_path
        )

    sigma = noise_sigma(source.dim)
    rng = np.random.default_rng(seed)
    sparse = Bm25Sparse()
    vectors = EdgeVectorStore(out.vectors_path, source.dim, sparse_idf=True)
    graph = EmbeddedGraphStore(out.graph_path)
    await asyncio.to_thread(graph.load)
    tally = Tally()
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
                points, chunks, entities = copy_of(
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
