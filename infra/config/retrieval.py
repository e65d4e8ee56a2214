"""Retrieval's settings: how the saga runs search, fusion and classification (as separate
steps or folded into one search command), how channels are fused and completed, chunking,
the critic's threshold, and the models (dense encoder, BGE-M3, reranker, NLI) with the threads
and processes they run on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


class RetrievalSettings(BaseModel):
    """Retrieval and ingestion: one group of `infra.settings.Settings`."""

    default_top_k: int = Field(8, ge=1, le=50, description="Chunks given to generation.")
    graph_bridge: bool = Field(
        True, description="Fusion adds documents about the best chunks' entities (multi-hop)."
    )
    channel_top_k: int = Field(20, ge=1, le=200, description="Chunks each channel returns.")
    saga_state_cache: int = Field(
        4096,
        ge=0,
        description="Running requests whose last committed state an orchestrator process keeps "
        "in memory, so a transition skips reading and parsing it (the commit still checks its "
        "version); 0 = read every time.",
    )
    search_batch: bool = Field(
        True,
        description="One search command per query for all its document channels, run side by "
        "side by one search worker (false: a command per channel, for deployments that serve "
        "channels from different processes).",
    )
    fuse_with_search: bool = Field(
        True,
        description="When one search command holds all an attempt searches, its worker fuses "
        "the rankings too and answers with the fused list: one hop fewer a request (false: "
        "fusion is always a step of its own, for deployments that run it in other processes).",
    )
    classify_with_search: bool = Field(
        True,
        description="A question outside a conversation, asked for an answer, is classified by "
        "the search worker in its first search command instead of by a classify step: one hop "
        "and one saga transition fewer a request. The search workers load the intent model "
        "then. Needs RAGBUS_SEARCH_BATCH and RAGBUS_FUSE_WITH_SEARCH (false: a classify step "
        "for every question, for deployments that run the classifier in other processes).",
    )
    search_replicas: int = Field(
        0,
        ge=0,
        le=8,
        description="Search replicas the process that owns the embedded stores starts beside "
        "itself: each serves search commands from a copy of the vectors and the graph, in its "
        "own process and GIL, while its copy holds every write; the owner answers the rest "
        "(docs/bus.md, The store-owning process's reads). Each costs the stores' size again in "
        "memory and on disk.",
    )
    search_replica_settle_s: float = Field(
        5.0,
        ge=0.0,
        le=3600.0,
        description="How long the stores must go unwritten before a replica whose copy is "
        "behind fetches a new one: during an ingest the owner answers alone, rather than "
        "copying the stores again for every batch.",
    )
    submit_in_process: bool = Field(
        True,
        description="Where the API runs in the orchestrator's process (`ragbus up`), it hands "
        "a question to the saga in that process, which commits its first step and sends its "
        "first command, instead of publishing rag.query.submitted for the saga to consume: one "
        "message and one Redis read fewer a request (false: always over the bus).",
    )
    fusion: Literal["convex", "rrf"] = Field(
        "convex",
        description="How the fuse step combines the channels: convex (each channel's scores, "
        "min-max normalised, weighted by the intent) or rrf (weighted reciprocal ranks).",
    )
    score_completion: bool = Field(
        True,
        description="With convex fusion, the vector and sparse channels each score the chunks "
        "the other found and they did not list (a search restricted to those ids), so fusion "
        "normalises and weighs every candidate by both text channels instead of counting 0 for "
        "a chunk one of them just missed (false: each channel's own list only).",
    )
    search_feedback: bool = Field(
        True,
        description="With convex fusion and BM25, the vector and sparse channels search again "
        "with what their first hits say (pseudo-relevance feedback: the query's embedding moved "
        "toward the three best chunks', BM25 with RM3's expanded terms), except for a question "
        "that names a particular document's title (one the collection does not mention as "
        "often as a generic entity); fusion then gives the graph channels weight 0 (false: the "
        "first search only, and the intent's weights for every question).",
    )
    rrf_k: int = Field(60, ge=1, description="Reciprocal rank fusion constant (fusion=rrf).")
    chunk_chars: int = Field(800, ge=100, le=16_000, description="Target chunk size in characters.")
    chunk_overlap_chars: int = Field(120, ge=0, description="Overlap between chunks.")
    critic_accept: float = Field(0.55, ge=0, le=1, description="Confidence the critic accepts.")
    encoder_path: Path | None = Field(
        None, description="Sentence-transformers model dir; unset = the bundled MiniLM."
    )
    encoder_precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto",
        description="Dense encoder arithmetic; auto = bf16 for ingestion's batches where the "
        "CPU has bf16 instructions, fp32 for queries, on a GPU and elsewhere.",
    )
    encoder_runtime: Literal["auto", "onnx", "torch"] = Field(
        "auto",
        description="Dense encoder runtime; auto = torch on a GPU or where it runs bf16 "
        "(ingestion's batches), ONNX Runtime (fp32) elsewhere, queries included.",
    )
    encoder_threads: int = Field(
        0,
        ge=0,
        le=64,
        description="Encoder intra-op threads; 0 = this process's share of the cores "
        "(cores ÷ RAGBUS_HOST_PROCESSES), at most 4, for corpora (ingestion's batches), and "
        "one for the query path's ONNX encoder (a question is too short to split).",
    )
    blas_threads: int = Field(
        1,
        ge=0,
        le=64,
        description="Threads of numpy's BLAS (OpenBLAS) in a serving process; 0 = the "
        "library's default (a thread per core, spinning between calls).",
    )
    host_processes: int = Field(
        0,
        ge=0,
        le=256,
        description="ragbus processes (or `ragbus up` stacks) sharing this machine's cores; "
        "each sizes its thread pools to its share. 0 = one: a `ragbus up` stack counts as one, "
        "its processes take turns (it passes the setting to its child).",
    )
    background_process: bool = Field(
        True,
        description="Run ingestion's encoder passes, entity extraction and community detection "
        "in a child process under SCHED_IDLE (a core no query wants), off the query path; "
        "false = threads of the same process.",
    )
    bge_m3_path: Path | None = Field(
        None,
        description="BGE-M3 model dir (FlagEmbedding); set = dense 1024-d + learned sparse "
        "instead of MiniLM + BM25.",
    )
    reranker_path: Path | None = Field(
        None, description="Cross-encoder dir (FlagEmbedding reranker); set = rerank fused chunks."
    )
    rerank_top_n: int = Field(
        30, ge=1, le=200, description="Fused chunks the reranker rescores (when one is set)."
    )
    nli_path: Path | None = Field(
        None,
        description="Local NLI cross-encoder (transformers sequence classification with an "
        "entailment label); set = the critic scores support by entailment.",
    )
