"""`ragbus source`: a tenant's sources kept in sync, over HTTP with the tenant's own key
(`--token`, or RAGBUS_API_TOKEN): what `/v1/sources` does (`api.sources`). The syncs run in
the sources workers, as ingest jobs; `--wait` follows one to its end with a progress bar."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cli.common import DEFAULT_API, ApiUrl, Failure, Token, access_option, call_api, console, errors

source_app = typer.Typer(
    help="Sources kept in sync: a folder ragbus keeps indexed as it changes (new files "
    "indexed, changed ones replaced, deleted ones deleted), on a schedule or as the OS reports "
    "each change. Run with the tenant's own key (--token).",
    no_args_is_help=True,
)

AsJson = Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")]
Wait = Annotated[
    bool, typer.Option("--wait/--no-wait", help="Follow the sync's job until it ends.")
]
WAIT_POLL_S = 0.5


def register(app: typer.Typer) -> None:
    app.add_typer(source_app, name="source")


async def _follow(client: Any, job_id: str) -> dict[str, Any]:
    """Poll the job until it ends, with a bar of its documents handled."""
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("syncing", total=None)
        while True:
            job: dict[str, Any] = await client.job(job_id)
            handled = sum(
                int(job.get(key) or 0)
                for key in ("documents_done", "documents_unchanged", "documents_failed")
            )
            progress.update(bar, total=job.get("expected"), completed=handled)
            if job.get("status") in ("completed", "failed"):
                return job
            await asyncio.sleep(WAIT_POLL_S)


def _ended(job: dict[str, Any]) -> None:
    console.print(
        f"job {job['job_id']} {job['status']}: {job.get('documents_done', 0)} indexed or "
        f"deleted, {job.get('documents_unchanged', 0)} unchanged, "
        f"{job.get('documents_failed', 0)} failed",
        soft_wrap=True,
    )
    for name, reason in sorted((job.get("errors") or {}).items()):
        console.print(f"  {name}: {reason}", soft_wrap=True, markup=False, highlight=False)
    if job.get("status") != "completed" or job.get("documents_failed"):
        raise Failure(f"the sync of job {job['job_id']} did not index everything", 3)


def _queued(answer: dict[str, Any], what: str, wait: bool, api: str, token: str | None) -> None:
    console.print(f"{what}: job {answer['job_id']} ({answer['status_url']})", soft_wrap=True)
    if wait:
        _ended(call_api(api, token, lambda c: _follow(c, answer["job_id"])))


@source_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="1-48 lowercase letters, digits or inner '-'.")],
    location: Annotated[
        str,
        typer.Argument(
            help="A folder (under one of the operator's RAGBUS_SOURCE_ROOTS), a web site's "
            "URL (or its sitemap's), or s3://bucket/prefix."
        ),
    ],
    kind: Annotated[
        str | None,
        typer.Option(help="folder, web or s3 (default: from the location)."),
    ] = None,
    namespace: Annotated[str, typer.Option(help="Where its documents go.")] = "default",
    every: Annotated[
        float | None, typer.Option(help="Sync every this many seconds (a schedule).", min=1)
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="Sync as soon as the OS says a file changed.")
    ] = False,
    include: Annotated[
        list[str] | None,
        typer.Option("--include", help="A glob of paths to read, `*` crossing folders (repeat)."),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option("--exclude", help="A glob of paths never read; wins over --include."),
    ] = None,
    metadata: Annotated[
        str | None, typer.Option(help="JSON object stamped on each of its documents.")
    ] = None,
    access: Annotated[
        str | None,
        typer.Option(help='Who of the tenant may read its documents: \'{"groups": ["legal"]}\'.'),
    ] = None,
    s3: Annotated[
        str | None,
        typer.Option(
            help='s3: JSON, {"endpoint_url": ..., "region": ..., "access_key_id": ..., '
            '"secret_access_key": ...} or {"anonymous": true}.'
        ),
    ] = None,
    max_pages: Annotated[
        int | None, typer.Option(help="web: pages listed at most per sync.", min=1)
    ] = None,
    wait: Wait = False,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
) -> None:
    """Declare a source; its first sync starts at once."""
    readers = access_option(access)
    kind = kind or _kind_of(location)
    if kind == "folder":
        location = str(Path(location).absolute())
    spec: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "location": location,
        "namespace": namespace,
        "watch": watch,
        "include": include or [],
        "exclude": exclude or [],
    }
    if every is not None:
        spec["every_s"] = every
    if metadata is not None:
        try:
            spec["metadata"] = json.loads(metadata)
        except ValueError as exc:
            raise Failure(f"--metadata is not JSON: {exc}", 2) from exc
    if readers is not None:
        spec["access"] = readers.model_dump(exclude_defaults=True)
    if s3 is not None:
        try:
            spec["s3"] = json.loads(s3)
        except ValueError as exc:
            raise Failure(f"--s3 is not JSON: {exc}", 2) from exc
    if max_pages is not None:
        spec["web"] = {"max_pages": max_pages}
    answer = call_api(api, token, lambda c: c.create_source(spec))
    _queued(answer, f"source {name} added; its first sync", wait, api, token)


def _kind_of(location: str) -> str:
    if location.startswith(("http://", "https://")):
        return "web"
    if location.startswith("s3://"):
        return "s3"
    return "folder"


@source_app.command("list")
def list_sources(as_json: AsJson = False, api: ApiUrl = DEFAULT_API, token: Token = None) -> None:
    """The tenant's sources, each with its last sync."""
    sources = call_api(api, token, lambda c: c.sources())
    if as_json:
        console.print_json(json.dumps(sources))
        return
    if not sources:
        errors.print("no sources yet: `ragbus source add NAME FOLDER --watch`")
    for source in sources:
        how = ["watched"] if source.get("watch") else []
        if source.get("every_s"):
            how.append(f"every {source['every_s']:g} s")
        line = f"{source['name']}: {source['location']} -> {source['namespace']}"
        line += f" ({', '.join(how) or 'on demand'})"
        if source.get("removing"):
            line += " [removing]"
        console.print(line, soft_wrap=True, markup=False, highlight=False)
        last = source.get("last_sync")
        if last:
            counts = last.get("counts") or {}
            found = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
            console.print(
                f"  last sync {last['job_id']} {last['status']} at {last['started_at']}: "
                f"{found or 'nothing listed'}"
                + (f"; {last['error']}" if last.get("error") else ""),
                soft_wrap=True,
                markup=False,
                highlight=False,
            )


@source_app.command("set")
def set_schedule(
    name: Annotated[str, typer.Argument(help="The source's name.")],
    every: Annotated[
        float | None, typer.Option(help="Sync every this many seconds.", min=1)
    ] = None,
    no_schedule: Annotated[
        bool, typer.Option("--no-schedule", help="End its schedule (`every`).")
    ] = False,
    watch: Annotated[
        bool | None,
        typer.Option("--watch/--no-watch", help="Follow the folder's changes, or stop."),
    ] = None,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
) -> None:
    """Change a source's schedule; it holds from the scheduler's next tick."""
    schedule: dict[str, Any] = {}
    if every is not None or no_schedule:
        schedule["every_s"] = None if no_schedule else every
    if watch is not None:
        schedule["watch"] = watch
    if not schedule:
        raise Failure("nothing to change: give --every, --no-schedule or --watch/--no-watch", 2)
    source = call_api(api, token, lambda c: c.set_source_schedule(name, **schedule))
    how = ["watched"] if source.get("watch") else []
    if source.get("every_s"):
        how.append(f"every {source['every_s']:g} s")
    console.print(f"source {name}: {', '.join(how) or 'on demand'}")


@source_app.command("sync")
def sync(
    name: Annotated[str, typer.Argument(help="The source's name.")],
    wait: Wait = True,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
) -> None:
    """Sync a source now (one running meanwhile syncs once more when it ends)."""
    answer = call_api(api, token, lambda c: c.sync_source(name))
    _queued(answer, f"source {name} syncing", wait, api, token)


@source_app.command("remove")
def remove(
    name: Annotated[str, typer.Argument(help="The source's name.")],
    keep_documents: Annotated[
        bool,
        typer.Option("--keep-documents", help="Keep its documents indexed (they sync no more)."),
    ] = False,
    wait: Wait = False,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
) -> None:
    """Remove a source and delete every document it indexed (unless --keep-documents)."""
    answer = call_api(api, token, lambda c: c.remove_source(name, keep_documents))
    if answer is None:
        console.print(f"source {name} removed; its documents kept")
        return
    _queued(answer, f"source {name} removing its documents", wait, api, token)
