"""The perturbed copies a `ragbus bench-scale` corpus is made of (`bench.scale_build` writes
them): how copy k of a source document differs from copy 0, and `copy_of`, which makes it.

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
  entities of a bigger corpus do. Communities are detected once, at the end of the build, and
  their summaries embedded with the project's encoder, as an ingest job's end does; timed on
  their own, since Louvain over the whole co-occurrence graph is corpus-wide Python work
  (seconds at 3k chunks already).

`HOW` says the same in one paragraph, for the build's report (`scale.json`).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.scale_source import SourceDocument
from infra.retrieval.chunking import Chunk, chunk_id_for
from infra.retrieval.entities import Entity
from infra.retrieval.sparse import Bm25Sparse
from infra.retrieval.vectors.points import StoredPoint

TARGET_COSINE = 0.95
"""Cosine of a copy's dense (and sentence) vector to the original's, in expectation."""
DROP_RATE = 0.10
"""Share of a sentence's inner words a copy drops."""
SWAP_RATE = 0.05
"""Chance that a kept inner word swaps places with the next one."""
RENAME_SHARE = 0.5
"""Share of the entities a copy renames (`<name> copy<k>`); the rest are shared by all copies."""

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


@dataclass
class Tally:
    cosine_sum: float = 0.0
    cosine_min: float = 1.0
    perturbed: int = 0
    prepare_s: float = 0.0
    vectors_s: float = 0.0
    graph_s: float = 0.0
    write_s: float = 0.0
    """Wall time of the writes: the two stores' overlap."""


def copy_of(
    doc: SourceDocument,
    copy: int,
    namespace: str,
    seed: int,
    sigma: float,
    rng: np.random.Generator,
    sparse: Bm25Sparse,
    tally: Tally,
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
