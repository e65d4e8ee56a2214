"""Tiny XLM-RoBERTa models built offline, in a directory of the test's choosing.

They have the layout of the real ones — BGE-M3 (a transformer plus `sparse_linear.pt` and
`colbert_linear.pt`) and a cross-encoder reranker (a sequence classifier with one label) — so
FlagEmbedding loads them exactly as it would `BAAI/bge-m3` or `BAAI/bge-reranker-v2-m3`, but
their weights are random: tests check shapes, plumbing and ordering, never relevance. The NLI
model (a sequence classifier with contradiction / neutral / entailment labels) loads through
transformers' Auto classes, as a real MNLI cross-encoder would.
"""

from __future__ import annotations

import json
from pathlib import Path

HIDDEN = 32
SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # XLM-R ids 0..4
CORPUS = [
    "Statins lower LDL cholesterol in adults with heart disease.",
    "Vitamin D deficiency weakens bone density during the winter.",
    "Knead the dough for ten minutes and bake the bread at two hundred degrees.",
    "JetStream stores messages in streams and consumers acknowledge each message.",
    "Redis keeps the saga state of every request in one atomic transaction.",
    "The Panama Canal links the Atlantic Ocean with the Pacific Ocean.",
    "Who designed the Gatun Locks and how long is the canal?",
    "Aspirin thins the blood; ibuprofen reduces inflammation and pain.",
]


def _tokenizer(directory: Path) -> int:
    """Train a small Unigram vocabulary and save it as an XLM-R tokenizer; returns its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import XLMRobertaTokenizerFast

    raw = Tokenizer(models.Unigram())
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=300, special_tokens=SPECIAL_TOKENS, unk_token="<unk>", show_progress=False
    )
    raw.train_from_iterator(CORPUS * 4, trainer=trainer)
    vocab = [
        (str(piece), float(score)) for piece, score in json.loads(raw.to_str())["model"]["vocab"]
    ]
    assert [piece for piece, _ in vocab[: len(SPECIAL_TOKENS)]] == SPECIAL_TOKENS
    tokenizer = XLMRobertaTokenizerFast(vocab=vocab, model_max_length=512)
    tokenizer.save_pretrained(str(directory))
    return len(vocab)


def _config(vocab_size: int, **extra: object) -> object:
    from transformers import XLMRobertaConfig

    return XLMRobertaConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=514,  # positions start after the pad id, as in XLM-R
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        **extra,
    )


def build_bge_m3(directory: Path, *, heads: bool = True, seed: int = 0) -> Path:
    """A BGE-M3-shaped model; `heads=False` leaves out `sparse_linear.pt` / `colbert_linear.pt`."""
    import torch
    from transformers import XLMRobertaModel

    torch.manual_seed(seed)
    directory.mkdir(parents=True, exist_ok=True)
    vocab_size = _tokenizer(directory)
    XLMRobertaModel(_config(vocab_size)).save_pretrained(str(directory))  # type: ignore[arg-type]
    if heads:
        sparse = torch.nn.Linear(HIDDEN, 1)
        with torch.no_grad():  # a positive bias: most tokens get a weight above zero
            sparse.bias.fill_(0.5)
        torch.save(sparse.state_dict(), directory / "sparse_linear.pt")
        torch.save(torch.nn.Linear(HIDDEN, HIDDEN).state_dict(), directory / "colbert_linear.pt")
    return directory


def build_reranker(directory: Path, *, seed: int = 1) -> Path:
    """A cross-encoder with the reranker's layout: one logit per (query, passage) pair."""
    import torch
    from transformers import XLMRobertaForSequenceClassification

    torch.manual_seed(seed)
    directory.mkdir(parents=True, exist_ok=True)
    vocab_size = _tokenizer(directory)
    model = XLMRobertaForSequenceClassification(_config(vocab_size, num_labels=1))  # type: ignore[arg-type]
    with torch.no_grad():  # random logits barely differ between inputs: spread them out
        model.classifier.out_proj.weight.mul_(1000.0)
    model.save_pretrained(str(directory))
    return directory


NLI_LABELS = {0: "contradiction", 1: "neutral", 2: "entailment"}


def build_nli(directory: Path, *, seed: int = 2) -> Path:
    """An NLI cross-encoder's layout: three logits per (premise, hypothesis) pair, labelled
    contradiction / neutral / entailment as in MNLI-trained models."""
    import torch
    from transformers import XLMRobertaForSequenceClassification

    torch.manual_seed(seed)
    directory.mkdir(parents=True, exist_ok=True)
    vocab_size = _tokenizer(directory)
    config = _config(
        vocab_size,
        num_labels=len(NLI_LABELS),
        id2label=NLI_LABELS,
        label2id={label: i for i, label in NLI_LABELS.items()},
    )
    model = XLMRobertaForSequenceClassification(config)  # type: ignore[arg-type]
    with torch.no_grad():  # random logits barely differ between inputs: spread them out
        model.classifier.out_proj.weight.mul_(1000.0)
    model.save_pretrained(str(directory))
    return directory
