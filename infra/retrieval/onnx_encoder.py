"""The sentence encoder on ONNX Runtime: the same weights, exported once from the local model
directory, run without torch.

Measured on this project's 2-core AMD EPYC (AVX2, no bf16): one short query costs 8 ms of CPU
instead of torch's 19 ms; 800-character chunks run at the same speed (both are bound by fp32
matrix products there). The embeddings' cosine to sentence-transformers' fp32 ones is above
0.99999 (`tests/unit/test_encoder.py` holds it to 0.999).

The export needs torch and transformers, once: `ensure_onnx_model` writes
`<data dir>/models/<name>-<key>.onnx`, keyed by the model's files, checks it against the torch
model on a probe text, and reuses it from then on. Only sentence-transformers models that pool
by mean or by CLS token are exported; anything else keeps the torch runtime.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from infra.logging import get_logger
from infra.retrieval.encoder_base import Encoder
from infra.retrieval.span_pooling import TokenStates

log = get_logger(__name__)

DEFAULT_MAX_SEQ = 256
PROBE = "Statins lower LDL cholesterol; vitamin D does not. Who designed the Gatun Locks?"
MIN_PROBE_COSINE = 0.999
OPSET = 17


class OnnxUnsupported(Exception):
    """This model directory cannot run on the ONNX path (pooling, layout or export failed)."""


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def pooling_mode(model_dir: Path) -> str:
    """`mean` or `cls`, from a sentence-transformers model's pooling module."""
    pooling = next((m for m in _modules(model_dir) if m.get("type", "").endswith("Pooling")), None)
    if pooling is None:
        raise OnnxUnsupported(f"{model_dir} has no sentence-transformers pooling module")
    config = _read_json(model_dir / pooling.get("path", "1_Pooling") / "config.json")
    if config.get("pooling_mode_mean_tokens"):
        return "mean"
    if config.get("pooling_mode_cls_token"):
        return "cls"
    raise OnnxUnsupported(f"pooling {config} is neither mean nor CLS")


def _modules(model_dir: Path) -> list[dict[str, Any]]:
    path = model_dir / "modules.json"
    return list(json.loads(path.read_text())) if path.exists() else []


def normalizes(model_dir: Path) -> bool:
    return any(m.get("type", "").endswith("Normalize") for m in _modules(model_dir))


def max_seq_length(model_dir: Path) -> int:
    config = _read_json(model_dir / "sentence_bert_config.json")
    return int(config.get("max_seq_length") or DEFAULT_MAX_SEQ)


def model_key(model_dir: Path) -> str:
    """Changes when the weights or the configuration change."""
    digest = hashlib.sha256()
    for name in ("config.json", "tokenizer.json", "modules.json"):
        path = model_dir / name
        if path.exists():
            digest.update(path.read_bytes())
    for weights in sorted(model_dir.glob("*.safetensors")) + sorted(model_dir.glob("*.bin")):
        stat = weights.stat()
        digest.update(f"{weights.name}:{stat.st_size}".encode())
    return digest.hexdigest()[:16]


class OnnxEncoder(Encoder):
    """L2-normalised float32 embeddings from an ONNX Runtime session; `encode` may be called
    from several threads at once (ONNX Runtime sessions are thread-safe). A mean-pooling model
    also pools spans (`encode_spans`) from the token states it pools the text from."""

    runtime = "onnx"

    def __init__(self, onnx_path: Path, model_dir: Path, name: str, threads: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # ONNX Runtime's pool threads spin after each run by default, waiting for the next:
        # beside an event loop and other workers on a few cores that is stolen CPU
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            str(onnx_path), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = [i.name for i in self._session.get_inputs()]
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_seq_length(model_dir))
        config = _read_json(model_dir / "tokenizer_config.json")
        pad = str(config.get("pad_token") or "[PAD]")
        pad_id = self._tokenizer.token_to_id(pad)
        self._pad_id = 0 if pad_id is None else int(pad_id)
        self._mode = pooling_mode(model_dir)
        self._normalize = normalizes(model_dir)
        self.pools_spans = self._mode == "mean"
        self.name = name
        self.precision = "fp32"
        self.threads = threads
        self.dim = int(self._run(["dimension probe"]).shape[-1])

    def _forward(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, list[Any]]:
        """The token states of `texts` (padded), their attention mask and their encodings."""
        encodings = self._tokenizer.encode_batch(texts)
        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(texts), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        types = np.zeros((len(texts), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            ids[row, :n] = encoding.ids
            mask[row, :n] = 1
            types[row, :n] = encoding.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        hidden = self._session.run(None, {name: feeds[name] for name in self._inputs})[0]
        return np.asarray(hidden, dtype=np.float32), mask, encodings

    def _pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if self._mode == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        if self._normalize:
            pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return np.asarray(pooled, dtype=np.float32)

    def _run(self, texts: list[str]) -> np.ndarray:
        hidden, mask, _ = self._forward(texts)
        return self._pool(hidden, mask)

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        return self._run(texts)

    def _token_batch(self, texts: list[str]) -> list[TokenStates]:
        """The pooled embeddings and, from the same pass, each text's token states with the
        tokenizer's character offsets (special tokens have empty ones)."""
        hidden, mask, encodings = self._forward(texts)
        dense = self._pool(hidden, mask)
        return [
            TokenStates(
                dense=dense[row],
                tokens=hidden[row, : len(encoding.ids)],
                offsets=np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2),
            )
            for row, encoding in enumerate(encodings)
        ]


def export_onnx(model_dir: Path, target: Path) -> None:
    """Export the transformer of a sentence-transformers model (torch, once) to `target`."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir)).eval()
    sample = tokenizer(
        ["an export probe", "a second, longer export probe"], return_tensors="pt", padding=True
    )
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]

    class Hidden(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return self.inner(**dict(zip(names, args, strict=True))).last_hidden_state

    axes = {name: {0: "batch", 1: "tokens"} for name in names}
    axes["last_hidden_state"] = {0: "batch", 1: "tokens"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on shapes it fixes: none apply
        torch.onnx.export(
            Hidden(model),
            tuple(sample[n] for n in names),
            str(target),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )


def ensure_onnx_model(model_dir: Path, cache_dir: Path, name: str) -> Path:
    """The exported model for `model_dir`, exported (and checked) on first use."""
    pooling_mode(model_dir)  # refuse early what the ONNX path cannot pool
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / f"{name}-{model_key(model_dir)}.onnx"
    if target.exists():
        return target
    # one export per file: the processes of a stack (and stacks sharing RAGBUS_MODELS_DIR)
    # start together; the first exports, the others wait for its file instead of doing the
    # same seconds of CPU beside it
    with open(target.with_suffix(".lock"), "a") as lock:
        if _locked_by_another(lock):
            log.info("encoder_onnx_wait", target=str(target))
            fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        return _export_checked(model_dir, target)


def _locked_by_another(lock: Any) -> bool:
    """Take the export lock if it is free; whether another process holds it."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    return False


def _export_checked(model_dir: Path, target: Path) -> Path:
    """Export beside `target`, check the export against torch, and only then move it into
    place: a process that finds `target` without taking the lock (`ensure_onnx_model`'s first
    look) reads a checked model or none, never one being written or about to be refused."""
    log.info("encoder_onnx_export", model=str(model_dir), target=str(target))
    candidate = target.with_name(f"{target.stem}.{os.getpid()}.export.onnx")
    try:
        try:
            export_onnx(model_dir, candidate)
            cosine = _probe_cosine(model_dir, candidate)
        except Exception as exc:
            raise OnnxUnsupported(f"export failed: {type(exc).__name__}: {exc}") from exc
        if cosine < MIN_PROBE_COSINE:
            raise OnnxUnsupported(f"the exported model disagrees with torch (cosine {cosine:.5f})")
        os.replace(candidate, target)
    finally:
        candidate.unlink(missing_ok=True)
    log.info("encoder_onnx_exported", target=str(target), probe_cosine=round(cosine, 6))
    return target


def _probe_cosine(model_dir: Path, exported: Path) -> float:
    """Cosine between the exported model's and sentence-transformers' (fp32) probe vectors."""
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(model_dir), device="cpu").encode(
        [PROBE], convert_to_numpy=True, normalize_embeddings=True
    )[0]
    ours = OnnxEncoder(exported, model_dir, "probe", threads=1).encode([PROBE])[0]
    return float(np.dot(reference, ours) / (np.linalg.norm(reference) * np.linalg.norm(ours)))
