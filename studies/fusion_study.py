"""Fuse the same requests' channel rankings again, offline, by several rules, and score each.

`ragbus eval --requests-out FILE` keeps what every query's answer carried: its intent, the
intent's weights, each channel's chunk ranking with its scores, and the pipeline's fused list
(the bridge's chunks marked). This replays fusion on those rankings, so rules are compared on
exactly the same retrieval, in seconds, without a stack:

    python -m studies.fusion_study --beir ../shared/data/nfcorpus --split dev \\
        --requests results/requests-nfcorpus-dev.jsonl --out results/fusion-study-nfcorpus.json

The rules are the product's own functions (`engines.fuse.rrf`), with the bridge's chunks taken
from the pipeline's fused list and placed as `engines.fuse.bridge` places them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.evaluation.beir import load_beir
from bench.evaluation.metrics import Run, document_run, evaluate
from bench.evaluation.runner import DENSE_SPARSE_WEIGHTS
from bench.provenance import run_record
from contracts.enums import Channel, Intent
from contracts.models import RetrievedChunk
from engines.fuse.bridge import BRIDGE_CHANNEL
from engines.fuse.rrf import Weights, weighted_convex, weighted_fusion, weighted_rrf
from infra.retrieval import intent_profiles as profiles

TOP_K = 100
PRIOR = {Channel(name): weight for name, weight in DENSE_SPARSE_WEIGHTS.items()}
"""The runner's plain dense+BM25 baseline."""

Rankings = dict[Channel, list[RetrievedChunk]]


def _chunks(items: list[dict[str, Any]], channel: str) -> list[RetrievedChunk]:
    return [
        RetrievedChunk(
            chunk_id=str(item["chunk_id"]),
            document_id=str(item["document_id"]),
            text="",
            score=float(item.get("score") or 0.0),
            rank=position,
            channels={channel: position},
        )
        for position, item in enumerate(items, start=1)
    ]


def rankings_of(request: dict[str, Any]) -> Rankings:
    channels = request["retrieval"]["channels"]
    return {Channel(name): _chunks(items, name) for name, items in channels.items()}


def weights_of(request: dict[str, Any]) -> Weights:
    return {Channel(name): float(w) for name, w in (request.get("weights") or {}).items()}


def bridged_of(request: dict[str, Any]) -> list[RetrievedChunk]:
    """The bridge's chunks in the pipeline's fused list, in its order."""
    fused = request["retrieval"]["fused"]
    picked = [item for item in fused if BRIDGE_CHANNEL in (item.get("channels") or {})]
    return _chunks(picked, BRIDGE_CHANNEL)


def with_bridge(chunks: list[RetrievedChunk], bridged: list[RetrievedChunk], at: int) -> list:
    """Place the bridged chunks after the first `at` fused ones (as the bridge does)."""
    ids = {c.chunk_id for c in bridged}
    rest = [c for c in chunks if c.chunk_id not in ids]
    return rest[:at] + bridged + rest[at:]


def from_zero(chunks: Sequence[RetrievedChunk]) -> list[float]:
    """A channel's scores scaled from 0 to its best (every channel's scores are non-negative)
    instead of min-max: a rival normalisation that does not depend on how deep a list goes,
    for the comparison only (all 1 when the best is 0)."""
    top = max((chunk.score for chunk in chunks), default=0.0)
    return [chunk.score / top if top > 0 else 1.0 for chunk in chunks]


def z_scores(chunks: Sequence[RetrievedChunk]) -> list[float]:
    """A channel's scores standardised over its list, then shifted to start at 0: a rival to
    min-max that one outlying first hit does not squash (all 1 when they tie)."""
    if not chunks:
        return []
    values = [chunk.score for chunk in chunks]
    mean = sum(values) / len(values)
    spread = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    if spread == 0:
        return [1.0] * len(values)
    z = [(v - mean) / spread for v in values]
    low = min(z)
    return [v - low for v in z]


def by_agreement(chunks: list[RetrievedChunk], alpha: float) -> list[RetrievedChunk]:
    """CombMNZ's idea on fused scores: each chunk's score times (channels that found it)^alpha."""
    rescored = [(c.score * max(len(c.channels), 1) ** alpha, c) for c in chunks]
    rescored.sort(key=lambda pair: -pair[0])
    return [c for _, c in rescored]


def by_document(chunks: list[RetrievedChunk], share: float) -> list[RetrievedChunk]:
    """Each document's evidence summed: a document scores its best chunk plus `share` of its
    other chunks' scores, and its chunks move up together (best first)."""
    total: dict[str, float] = {}
    for chunk in chunks:  # best first: a document's first chunk is its best
        doc = chunk.document_id
        total[doc] = total[doc] + share * chunk.score if doc in total else chunk.score
    return sorted(chunks, key=lambda c: (-total[c.document_id], -c.score))


def routed_weights(request: dict[str, Any]) -> dict[str, Weights]:
    """The weights each routing rule gives the request's intent at its confidence: the
    product's gate (`intent_profiles.weights_for`), the prior always, the profile always,
    and the profile blended toward the prior by the confidence."""
    if request.get("intent") is None:
        return {}
    intent = Intent(request["intent"])
    profile = profiles.PROFILES[intent]
    confidence = float(request.get("intent_confidence") or 0.0)
    return {
        "gated route (the product)": profiles.weights_for(intent, confidence),
        "prior weights": dict(profiles.PRIOR),
        "the profile, however unsure": dict(profile),
        "blended by confidence": {
            c: profiles.PRIOR[c] + confidence * (profile[c] - profiles.PRIOR[c]) for c in profile
        },
    }


def run_of(ranking: list[RetrievedChunk]) -> dict[str, float]:
    return document_run([{"document_id": c.document_id} for c in ranking])


def study(
    requests: list[dict[str, Any]], qrels: Mapping[str, Mapping[str, int]], depth: int = TOP_K
) -> dict:
    """Every rule's metrics over the same requests, beside the pipeline's own fused list."""
    runs: dict[str, Run] = {}

    def add(name: str, qid: str, ranking: list[RetrievedChunk]) -> None:
        runs.setdefault(name, {})[qid] = run_of(ranking)

    for request in requests:
        qid = request["qid"]
        ranked = {c: chunks[:depth] for c, chunks in rankings_of(request).items()}
        weights = weights_of(request)
        bridged = bridged_of(request)
        runs.setdefault("pipeline", {})[qid] = document_run(request["retrieval"]["fused"])
        for channel, chunks in ranked.items():
            add(f"channel {channel.value}", qid, chunks)
        text = {c: ranked.get(c, []) for c in PRIOR}
        add("dense+bm25 rrf", qid, weighted_rrf(text, PRIOR, top_k=TOP_K))
        fused = weighted_rrf(ranked, weights, top_k=TOP_K)
        variants = {
            "rrf": fused,
            "convex": weighted_convex(ranked, weights, top_k=TOP_K),
            "convex from 0": weighted_fusion(ranked, weights, from_zero, top_k=TOP_K),
        }
        add("dense+bm25 convex", qid, weighted_convex(text, PRIOR, top_k=TOP_K))
        convex = variants["convex"]
        add("convex z-score", qid, weighted_fusion(ranked, weights, z_scores, top_k=TOP_K))
        for alpha in (0.25, 0.5):
            add(f"convex x channels^{alpha}", qid, by_agreement(convex, alpha))
        for share in (0.1, 0.3, 0.5):
            add(f"convex, documents +{share}", qid, by_document(convex, share))
        # what the route costs: the same rankings fused with the prior's weights and with
        # each intent's, the predicted one being one of them
        add("rrf, prior weights", qid, weighted_rrf(ranked, profiles.PRIOR, top_k=TOP_K))
        for intent, profile in profiles.PROFILES.items():
            add(f"rrf, {intent.value} weights", qid, weighted_rrf(ranked, profile, top_k=TOP_K))
        # and how the route's weights follow its confidence (the product: convex + bridge@3)
        for rule, routed in routed_weights(request).items():
            chunks = weighted_convex(ranked, routed, top_k=TOP_K)
            add(f"convex + bridge@3, {rule}", qid, with_bridge(chunks, bridged, 3)[:TOP_K])
        for name, chunks in variants.items():
            add(name, qid, chunks)
            for at in (3, 5, 10):
                add(f"{name} + bridge@{at}", qid, with_bridge(chunks, bridged, at)[:TOP_K])
    judged = {qid: dict(q) for qid, q in qrels.items() if qid in {r["qid"] for r in requests}}
    return {name: evaluate(judged, run) for name, run in sorted(runs.items())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beir", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--requests", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--depth", type=int, default=20, help="Each channel's list cut to this (channel_top_k)."
    )
    args = parser.parse_args(argv)
    beir = load_beir(args.beir, args.split)
    requests = [json.loads(line) for line in args.requests.read_text().splitlines() if line]
    report = {
        "dataset": str(args.beir),
        "split": args.split,
        "queries": len(requests),
        "intents": dict(Counter(str(r.get("intent")) for r in requests).most_common()),
        "depth": args.depth,
        "rules": study(requests, beir.qrels, args.depth),
    }
    for name, metrics in report["rules"].items():
        shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        print(f"{name:28s} {shown}")
    if args.out:
        report["run"] = run_record(["fusion_study", *(argv or sys.argv[1:])])
        report["run"]["command"] = "python -m studies.fusion_study " + " ".join(
            argv or sys.argv[1:]
        )
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
