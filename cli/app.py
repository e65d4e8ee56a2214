"""`ragbus`: run the services, ingest documents, ask questions, benchmark, and export specs.

The one Typer application. Each command module registers its commands on it; the order of
the calls below is the order `ragbus --help` lists them. `main` is where every command fails
well: a failure a person can fix (nothing answers at a URL, a token refused, a `Failure` a
command raised) is one sentence on stderr and exit status 1 (`cli.common.explain`), with the
traceback only under `--verbose` or RAGBUS_VERBOSE=1; any other exception is a bug and keeps
its traceback.
"""

from __future__ import annotations

import sys
import traceback

import typer

from cli import (
    ask,
    backup,
    bench,
    bench_backup,
    bench_documents,
    bench_doors,
    bench_encoder,
    bench_filters,
    bench_scale,
    bench_sync,
    chaos,
    demo,
    evaluate,
    ingest,
    intent,
    mcp,
    serve,
    sources,
    specs,
    tenants,
    users,
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
bench_documents.register(app)  # bench-documents
bench_doors.register(app)  # bench-doors
bench_filters.register(app)  # bench-filters
bench_sync.register(app)  # bench-sync
bench_backup.register(app)  # bench-backup
evaluate.register_benches(app)  # bench-conversations, bench-research, bench-critic
chaos.register(app)  # chaos
tenants.register(app)  # tenant create|list|revoke|nats-config
users.register(app)  # user create|list|groups|revoke|rotate-key
sources.register(app)  # source add|list|sync|remove
mcp.register(app)  # mcp
backup.register(app)  # backup, restore


def main() -> None:
    from cli.common import exit_code, explain, say, verbose_asked

    try:
        app()
    except Exception as exc:
        sentence = explain(exc)
        if sentence is None:
            raise
        if verbose_asked(sys.argv[1:]):
            traceback.print_exception(exc)
        say(sentence)
        sys.exit(exit_code(exc))


__all__ = ["app", "main"]
