"""`ragbus`: run the services, ingest documents, ask questions, benchmark, and export specs.

The one Typer application. Each command module registers its commands on it; the order of
the calls below is the order `ragbus --help` lists them.
"""

from __future__ import annotations

import typer

from cli import (
    ask,
    bench,
    bench_encoder,
    bench_scale,
    chaos,
    demo,
    evaluate,
    ingest,
    intent,
    serve,
    specs,
    tenants,
    vectors,
)

app = typer.Typer(
    help="ragbus: event-driven agentic RAG over NATS JetStream.",
    no_args_is_help=True,
    add_completion=False,
)

serve.register(app)  # up, api, orchestrator, worker, ping
ingest.register(app)  # ingest
ask.register(app)  # ask
evaluate.register(app)  # eval
intent.register(app)  # train-intent, eval-intent
vectors.register(app)  # migrate-vectors
demo.register(app)  # demo
specs.register(app)  # openapi, asyncapi, tables
bench.register(app)  # bench, bench-bus, bench-ingest
bench_scale.register(app)  # bench-scale, bench-scaleout
bench_encoder.register(app)  # bench-encoder
evaluate.register_benches(app)  # bench-conversations, bench-research, bench-critic
chaos.register(app)  # chaos
tenants.register(app)  # tenant create|list|revoke|nats-config


def main() -> None:
    app()


__all__ = ["app", "main"]
