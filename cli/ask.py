"""`ragbus ask`: a question over HTTP, its phases, streamed answer and sources."""

from __future__ import annotations

import asyncio
from enum import StrEnum
from typing import Annotated

import typer

from cli.common import (
    DEFAULT_API,
    ApiUrl,
    Failure,
    Token,
    Verbose,
    console,
    filter_option,
    interactive_logging,
)
from contracts.enums import Intent
from infra.settings import Settings


class AskMode(StrEnum):
    ANSWER = "answer"
    RESEARCH = "research"
    RETRIEVE = "retrieve"


def register(app: typer.Typer) -> None:
    app.command()(ask)


def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    intent: Annotated[Intent | None, typer.Option(help="Skip classification.")] = None,
    top_k: Annotated[int | None, typer.Option(min=1, max=50, help="Chunks to use.")] = None,
    namespace: Annotated[
        list[str] | None, typer.Option(help="Namespace to search (repeatable).")
    ] = None,
    mode: Annotated[
        AskMode,
        typer.Option(
            help="`answer`; `research`: plan sub-questions, answer each as a child request, "
            "and write a cited report; `retrieve`: rankings only.",
        ),
    ] = AskMode.ANSWER,
    session: Annotated[
        str | None,
        typer.Option(
            help="A conversation: follow-ups are understood from its earlier turns, and what "
            "it taught is recalled (`GET /v1/sessions/<id>` shows it).",
        ),
    ] = None,
    filter: Annotated[
        str | None,
        typer.Option(
            "--filter",
            help='Only documents whose metadata passes this JSON filter, e.g. \'{"year": '
            '{"$gte": 2020}, "file.type": "pdf"}\' (docs/usage.md, Filters).',
        ),
    ] = None,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
    verbose: Verbose = False,
) -> None:
    """Ask over HTTP: phases with their durations, the answer as it streams, its sources.
    Exits 1 when the request does not complete, or when the namespaces asked hold no
    documents."""
    from cli.answers import Found, ask_question
    from client import RagbusClient

    interactive_logging(Settings(), verbose)
    found = Found()
    narrowed = filter_option(filter)

    async def run() -> str | None:
        async with RagbusClient(api, token=token) as client:
            return await ask_question(
                client,
                question,
                console,
                intent=intent.value if intent else None,
                top_k=top_k,
                namespaces=namespace,
                session_id=session,
                mode=mode.value,
                found=found,
                narrowed=narrowed,
            )

    status = asyncio.run(run())  # what cannot be reached is told by `cli.app.main`
    if status != "completed":
        raise typer.Exit(1)
    if found.nothing_indexed:
        raise Failure(_nothing_indexed(namespace or [], api))


def _nothing_indexed(namespaces: list[str], api: str) -> str:
    from infra.runtime.services import redacted

    if not namespaces:
        return (
            f"nothing is indexed in the namespace 'default' of the API at {redacted(api)}: "
            "ingest documents first (`ragbus ingest PATH`), or ask another with --namespace"
        )
    names = ", ".join(repr(name) for name in namespaces)
    which = "the namespace" if len(namespaces) == 1 else "the namespaces"
    return (
        f"no documents are indexed in {which} {names} at {redacted(api)}: check the name, or "
        f"ingest into it (`ragbus ingest --namespace {namespaces[0]} PATH`); without "
        "--namespace, 'default' is searched"
    )
