"""BGE-M3 through FlagEmbedding: one model for the dense vectors and the sparse ones.

Set `RAGBUS_BGE_M3_PATH` to a local BGE-M3 directory (the transformer plus `sparse_linear.pt`
and `colbert_linear.pt`) and it replaces both MiniLM (dense) and BM25 (sparse): the dense
vector is the normalised CLS embedding (1024-d for the real model), the sparse vector is the
model's own lexical weights, `{token id: weight}`, which need no IDF from Qdrant.

FlagEmbedding is imported by the loader only, so processes that never load the model (the
fuse worker, the API) never import it or torch.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infra.logging import get_logger
from infra.retrieval.encoder import Encoder
from infra.retrieval.lexical import SparseVec
from infra.settings import Settings
from infra.threads import limit_tokenizer_threads, set_torch_threads, thread_share

log = get_logger(__name__)

BATCH_SIZE = 32
HEADS = ("sparse_linear.pt", "colbert_linear.pt")


def lexical_to_sparse(weights: Mapping[str | int, Any]) -> SparseVec:
    """FlagEmbedding's `{token_id_as_str: weight}` as Qdrant wants it: sorted int indices."""
    pairs = sorted((int(token), float(weight)) for token, weight in weights.items())
    kept = [(index, value) for index, value in pairs if value > 0]
    return [index for index, _ in kept], [value for _, value in kept]


class BgeM3Encoder(Encoder):
    """A `BGEM3FlagModel` behind the `Encoder` interface (`dim`, `name`, `encode`, `aencode`),
    plus the `SparseModel` one (`documents`, `query`, `idf_modifier=False`).

    One lock serialises every call into the model: torch modules are not meant to run forward
    passes from several threads at once, and FlagEmbedding moves the model between calls.
    """

    idf_modifier = False
    runtime = "flagembedding"
    coalesce_max_texts = BATCH_SIZE * 2

    def __init__(self, model: Any, name: str) -> None:  # no super().__init__: no ST model here
        self._model = model
        self._lock = threading.Lock()
        self.name = name
        self.precision = "fp32"  # FlagEmbedding manages its own arithmetic (use_fp16 off)
        probe = self._run(["dimension probe"], dense=True, sparse=False)["dense_vecs"]
        self.dim = int(np.asarray(probe).shape[-1])

    def _run(self, texts: list[str], *, dense: bool, sparse: bool, query: bool = False) -> Any:
        method = self._model.encode_queries if query else self._model.encode_corpus
        with self._lock:
            return method(
                texts,
                batch_size=BATCH_SIZE,
                return_dense=dense,
                return_sparse=sparse,
                return_colbert_vecs=False,
            )

    @staticmethod
    def _dense(vectors: Any) -> np.ndarray:
        array = np.asarray(vectors, dtype=np.float32)
        norms = np.linalg.norm(array, axis=1, keepdims=True)
        return array / np.where(norms > 0, norms, 1.0)

    # ---------------------------------------------------------------- dense (Encoder)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._dense(self._run(list(texts), dense=True, sparse=False)["dense_vecs"])

    # ---------------------------------------------------------------- sparse

    def encode_sparse_documents(self, texts: list[str]) -> list[SparseVec]:
        if not texts:
            return []
        out = self._run(list(texts), dense=False, sparse=True)
        return [lexical_to_sparse(weights) for weights in out["lexical_weights"]]

    def encode_sparse_query(self, text: str) -> SparseVec:
        [weights] = self._run([text], dense=False, sparse=True, query=True)["lexical_weights"]
        return lexical_to_sparse(weights)

    def encode_dense_sparse(self, texts: list[str]) -> tuple[np.ndarray, list[SparseVec]]:
        """Both document vectors from one forward pass (what ingestion uses)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32), []
        out = self._run(list(texts), dense=True, sparse=True)
        return self._dense(out["dense_vecs"]), [
            lexical_to_sparse(weights) for weights in out["lexical_weights"]
        ]

    # `SparseModel`
    def documents(self, texts: list[str]) -> list[SparseVec]:
        return self.encode_sparse_documents(texts)

    def query(self, text: str) -> SparseVec:
        return self.encode_sparse_query(text)


def _check_model_dir(path: Path) -> None:
    if not path.is_dir():
        raise FileNotFoundError(f"BGE-M3 model directory not found: {path}")
    missing = [name for name in HEADS if not (path / name).is_file()]
    if missing:
        # FlagEmbedding would random-initialise both heads and log one INFO line: the sparse
        # vectors would be noise. A BGE-M3 directory ships both files.
        raise FileNotFoundError(
            f"BGE-M3 model directory {path} lacks {', '.join(missing)}; refusing to load it "
            "(FlagEmbedding would silently use randomly initialised sparse/colbert heads)"
        )


def load_bge_m3(settings: Settings) -> BgeM3Encoder:
    """Load `settings.bge_m3_path` on CPU in fp32, offline, on this process's share of the
    cores (`RAGBUS_ENCODER_THREADS`, else `infra.threads.thread_share`)."""
    if settings.bge_m3_path is None:
        raise ValueError("RAGBUS_BGE_M3_PATH is not set")
    path = settings.bge_m3_path
    _check_model_dir(path)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    threads = settings.encoder_threads or thread_share(settings)  # a large model: no cap of 4
    limit_tokenizer_threads(threads)
    from FlagEmbedding import BGEM3FlagModel

    set_torch_threads(threads)
    # fp16 is FlagEmbedding's default even on CPU, where it is slow or unsupported.
    model = BGEM3FlagModel(str(path), use_fp16=False, devices="cpu")
    encoder = BgeM3Encoder(model, name=path.name)
    log.info("bge_m3_loaded", path=str(path), dim=encoder.dim)
    return encoder
