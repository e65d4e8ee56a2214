"""`ragbus chaos`: the failure suite (`bench.chaos`), with its report printed and saved.

The broker-side check reads each request's stored caller events with
`api.event_stream.stored_events`, handed to `bench.chaos.run_chaos`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from cli.common import console, errors, interactive_logging, save_json
from infra.settings import Settings


def _goals(report: dict[str, Any]) -> list[str]:
    """The suite's goals that this run missed."""
    missed = []
    requests = report["requests"]
    if requests["terminal_share"] != 1.0:
        missed.append("every request terminal")
    if any(report["duplicates"].values()):
        missed.append("no duplicate answer or done")
    if report["sse_streams_missing_events"]:
        missed.append("no event missed by a stream")
    redis = report.get("redis") or {}
    if redis.get("idempotency_keys_lost"):
        missed.append("no idempotency key lost")
    if redis.get("sessions_lost_turns"):
        missed.append("no session turn lost")
    if redis.get("quota_over_granted"):
        missed.append("no quota over-granted")
    if redis.get("sentinel") and (requests["completed_share"] or 0) < 0.99:
        missed.append("99 % completed with the Redis primary killed")
    ingest = report.get("ingest") or {}
    if ingest and (ingest["chunks_lost"] or ingest["chunks_extra"] or ingest["documents_lost"]):
        missed.append("every document indexed exactly once")
    if (requests["completed_share"] or 0) < 0.95:
        missed.append("95 % completed")
    if report["dead_letters"]:
        # an operator pages on the dead-letter stream: a failover or a kill must not fill it
        missed.append("no dead letter")
    return missed


def print_chaos(report: dict[str, Any]) -> None:
    requests, ingest = report["requests"], report.get("ingest") or {}
    table = Table(title="ragbus chaos", show_header=False)
    rows = [
        (
            "kills",
            f"{report['kills']} ({report['kills_by_role']}); nats and redis restarted "
            f"{report['service_restarts']['nats']} + {report['service_restarts']['redis']}",
        ),
        (
            "requests",
            f"{requests['submitted']} submitted, {requests['terminal']} terminal "
            f"({requests['by_status']})",
        ),
        (
            "NATS nodes",
            f"{report.get('nats_nodes', 1)}; node kills {report.get('nats_node_kills') or {}}",
        ),
        ("completed", f"{(requests['completed_share'] or 0) * 100:.1f} %"),
        (
            "duplicates",
            f"answers {report['duplicates']['answers']}, done {report['duplicates']['done']}",
        ),
        (
            "streams missing an event",
            f"{report['sse_streams_missing_events']} "
            f"({report['sse_events_after_done']} events published after their done)",
        ),
        ("dead letters", str(report["dead_letters"])),
        (
            "ingest",
            f"{ingest.get('documents_done')} done and {ingest.get('documents_unchanged')} "
            f"found indexed of {ingest.get('documents')} documents, "
            f"chunks lost {ingest.get('chunks_lost')}, extra {ingest.get('chunks_extra')}",
        ),
        (
            "latency",
            f"p50 {report['latency_ms']['p50'] or 0:,.0f} ms, "
            f"p95 {report['latency_ms']['p95'] or 0:,.0f} ms",
        ),
        (
            "client",
            f"{requests['submit_retries']} submit retries, "
            f"{requests['stream_resumes']} stream resumes",
        ),
    ]
    redis = report.get("redis") or {}
    if redis.get("sentinel"):
        rows.append(
            (
                "Redis primary",
                f"killed {redis['primary_kills']} times, failed over in {redis['failover_s']} s; "
                f"keys lost {redis.get('idempotency_keys_lost')} of "
                f"{redis.get('idempotency_keys_checked')}, sessions missing a turn "
                f"{redis.get('sessions_lost_turns')} of {redis.get('sessions_checked')}, "
                f"quota over-granted by {redis.get('quota_over_granted')}",
            )
        )
    for name, value in rows:
        table.add_row(name, value)
    # what was dead-lettered, so that a run that misses the goal says why in its own output
    for kind in report.get("dead_letter_kinds") or []:
        table.add_row(
            "  dead letter",
            f"{kind['count']} × {kind['subject']}: {kind['reason']}, {kind['error']!r} "
            f"(its request {kind['request']})",
        )
    console.print(table)


def _quota(value: str | None) -> tuple[float, int] | None:
    if value is None:
        return None
    rate, _, burst = value.partition(",")
    try:
        limits = (float(rate), int(burst))
    except ValueError:
        raise typer.BadParameter("--quota is RATE,BURST, e.g. 3,6") from None
    if limits[0] <= 0 or limits[1] < 1:
        raise typer.BadParameter("--quota needs a rate above 0 and a burst of 1 or more")
    return limits


def register(app: typer.Typer) -> None:
    app.command()(chaos)


def chaos(
    duration: Annotated[float, typer.Option("--duration", "-d", min=10, help="Seconds.")] = 60.0,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1)] = 2,
    kill_every: Annotated[
        float, typer.Option(min=0.5, help="Seconds between process kills (jittered).")
    ] = 4.0,
    ingest_documents: Annotated[
        int, typer.Option(min=1, help="Documents of the job whose ingest process is killed.")
    ] = 40,
    seed: Annotated[int | None, typer.Option(help="Random seed (kills, questions).")] = None,
    nats_nodes: Annotated[
        int,
        typer.Option(
            min=1,
            max=5,
            help="NATS nodes: 1 = one nats-server, killed once; 3 = a JetStream cluster "
            "(streams on three nodes), one node killed at a time.",
        ),
    ] = 1,
    nats_kill_every: Annotated[
        float, typer.Option(min=5, help="Seconds between NATS node kills on a cluster.")
    ] = 15.0,
    redis: Annotated[
        str,
        typer.Option(
            help="Redis: `single` (one redis-server, killed once) or `sentinel` (a primary, a "
            "replica and three sentinels; the primary killed every --redis-kill-every s, "
            "the clients in conversations, and the quota held to --quota).",
        ),
    ] = "single",
    redis_kill_every: Annotated[
        float, typer.Option(min=10, help="Seconds between Redis primary kills (sentinel).")
    ] = 60.0,
    quota: Annotated[
        str | None,
        typer.Option(
            help="RATE,BURST: the tenant's submissions a second and burst, which the checks "
            "hold the grants to (sentinel); unset = 3,6 with sentinel, the default otherwise.",
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Where to write the JSON report.")] = Path(
        "results/chaos.json"
    ),
) -> None:
    """Run every role in its own process on fresh nats-server and redis-server, ask questions,
    SIGKILL and restart processes, kill both servers once and the ingest process mid-job;
    then check from the broker and the stores that nothing was lost or doubled. With
    `--nats-nodes 3`, NATS is a three-node cluster and one node at a time is killed instead,
    stream leaders included. With `--redis sentinel`, Redis has a replica and three
    sentinels, its primary is killed on a schedule, and the checks add idempotency keys,
    sessions' turns and the quota's grants."""
    from api.event_stream import stored_events
    from api.idempotency import kept_query_key
    from bench.chaos import run_chaos

    if redis not in ("single", "sentinel"):
        raise typer.BadParameter("--redis is single or sentinel")
    sentinel = redis == "sentinel"
    limits = _quota(quota or ("3,6" if sentinel else None))

    interactive_logging(Settings(), verbose=False)
    console.print(
        f"chaos: {duration:g} s, {concurrency} clients, a kill every ~{kill_every:g} s, "
        f"{nats_nodes} NATS node(s) (starting the cluster first)"
    )
    report = asyncio.run(
        run_chaos(
            duration_s=duration,
            concurrency=concurrency,
            kill_every_s=kill_every,
            ingest_documents=ingest_documents,
            seed=seed,
            read_events=stored_events,
            nats_nodes=nats_nodes,
            nats_kill_every_s=nats_kill_every,
            redis_sentinel=sentinel,
            redis_kill_every_s=redis_kill_every,
            quota=limits,
            kept_key=kept_query_key,
        )
    )
    report["goals_missed"] = _goals(report)
    print_chaos(report)
    save_json(report, out)
    console.print(f"wrote {out}")
    if report["goals_missed"]:
        errors.print(f"goals missed: {', '.join(report['goals_missed'])}")
        raise typer.Exit(1)
