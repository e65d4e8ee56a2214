"""ragbus as an MCP server (`api.mcp_door` at /mcp, `ragbus mcp` on stdio) on a real `ragbus up`
in `tenants` mode, with the official SDK's client over both transports, and the MCP Inspector's
CLI as a client no one here wrote.

One stack for the module: tenant `acme` ingests the corpus through MCP's own `ingest` tool
(texts, a secret, and a Markdown file), asks, searches and reads; tenant `beta` tries to reach
any of it through the same tools and resources; tenant `slow`, with a rate of one submission,
shows a 429 as a tool error. `token` mode's 401s are checked on an API of their own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextResourceContents

from api.app import create_app
from infra.runtime.services import free_port
from tests.integration.conftest import own_services, serving
from tests.integration.corpus import DOCUMENTS, EXPECTED_DOCUMENT, QUESTION
from tests.up_process import ROOT, ragbus_up, tenants_env

pytestmark = pytest.mark.integration

ADMIN = "admin-key-for-the-mcp-suite-0123456789abcdef"
SECRET = "The Zephyr project codename is BLUEFINCH and its launch site is Kestrel Point."
NOTES = b"# Field notes\n\nThe heron colony nests at Osprey Bay every April.\n"
RAGBUS = str(Path(sys.executable).parent / "ragbus")
INSPECTOR = ROOT / "tools/mcp/node_modules/@modelcontextprotocol/inspector-cli/build"
TOOLS = {"ask", "search", "ingest", "job_status", "namespaces"}


@dataclass
class Stack:
    url: str
    env: dict[str, str]

    @property
    def mcp(self) -> str:
        return f"{self.url}/mcp"


@dataclass
class Tenant:
    name: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("mcp")
    api_port = free_port()
    env = tenants_env(root, api_port, free_port(), ADMIN)
    url = f"http://127.0.0.1:{api_port}"
    with ragbus_up(env, root / "up.log", url):
        yield Stack(url, env)


def _tenant(stack: Stack, name: str, **limits: Any) -> Tenant:
    made = httpx.post(
        f"{stack.url}/v1/admin/tenants",
        json={"tenant": name, **({"limits": limits} if limits else {})},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert made.status_code == 201, made.text
    return Tenant(name, made.json()["api_key"])


@pytest.fixture(scope="module")
def acme(stack: Stack) -> Tenant:
    return _tenant(stack, "acme")


@pytest.fixture(scope="module")
def beta(stack: Stack) -> Tenant:
    return _tenant(stack, "beta")


# -- clients -------------------------------------------------------------------------------


@asynccontextmanager
async def over_http(stack: Stack, tenant: Tenant, mode: str = "auto") -> AsyncIterator[Client]:
    """The SDK's client on /mcp with the tenant's key (`mode="legacy"`: the initialize
    handshake, as the SDKs before 2026-07-28 speak it)."""
    async with (
        create_mcp_http_client(headers=tenant.headers) as http,
        Client(streamable_http_client(stack.mcp, http_client=http), mode=mode) as client,
    ):
        yield client


@asynccontextmanager
async def over_stdio(stack: Stack, key: str) -> AsyncIterator[Client]:
    """`ragbus mcp --url …` spawned as a desktop client does, the key in its environment."""
    params = StdioServerParameters(
        command=RAGBUS,
        args=["mcp", "--url", stack.url],
        env={**stack.env, "RAGBUS_API_KEY": key},
        cwd=str(ROOT),
    )
    async with Client(params) as client:
        yield client


class Progress:
    def __init__(self) -> None:
        self.seen: list[tuple[float, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, message))


def text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text(result)
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


async def wait_job(client: Client, job_id: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = structured(await client.call_tool("job_status", {"job_id": job_id}))
        if job["status"] != "running":
            assert job["status"] == "completed", job
            return job
        await asyncio.sleep(0.3)
    raise AssertionError(f"job {job_id} did not finish")


@pytest.fixture(scope="module")
async def acme_corpus(stack: Stack, acme: Tenant) -> dict[str, str]:
    """acme's documents, sent through the `ingest` tool: the corpus as text, a secret in
    `docs`, and a Markdown file there too; each job followed with `job_status`."""
    texts = [
        {"document_id": d.id, "title": d.title, "text": d.text, "metadata": {"set": "wonders"}}
        for d in DOCUMENTS
    ]
    async with over_http(stack, acme) as client:
        corpus = structured(await client.call_tool("ingest", {"documents": texts}))
        secret = structured(
            await client.call_tool(
                "ingest",
                {
                    "documents": [
                        {"document_id": "secret-plan", "title": "Zephyr", "text": SECRET}
                    ],
                    "namespace": "docs",
                },
            )
        )
        notes = structured(
            await client.call_tool(
                "ingest",
                {
                    "files": [
                        {
                            "filename": "field notes.md",
                            "content_base64": base64.b64encode(NOTES).decode(),
                        }
                    ],
                    "namespace": "docs",
                    "metadata": {"team": "birds"},
                },
            )
        )
        for accepted in (corpus, secret, notes):
            assert accepted["status_url"] == f"/v1/ingest/{accepted['job_id']}"
            await wait_job(client, accepted["job_id"])
    assert corpus["accepted"] == len(DOCUMENTS)
    return {"corpus": corpus["job_id"], "secret": secret["job_id"], "notes": notes["job_id"]}


# -- streamable HTTP -------------------------------------------------------------------------


async def test_the_tools_and_the_document_template_are_listed(stack: Stack, acme: Tenant) -> None:
    async with over_http(stack, acme) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        templates = (await client.list_resource_templates()).resource_templates
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert "$ref" not in json.dumps(tool.input_schema), tool.name
    assert tools["ask"].input_schema["required"] == ["question"]
    assert set(tools["ask"].input_schema["properties"]) == {
        "question",
        "namespaces",
        "session_id",
        "filter",
    }
    assert set(tools["search"].input_schema["properties"]) == {
        "query",
        "namespaces",
        "top_k",
        "filter",
    }
    assert tools["search"].annotations is not None and tools["search"].annotations.read_only_hint
    assert [t.uri_template for t in templates] == ["ragbus://documents/{namespace}/{document_id}"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_ask_reports_its_phases_and_answers_with_citations(
    stack: Stack, acme: Tenant, acme_corpus: dict[str, str], mode: str
) -> None:
    """Over both eras of the protocol: the 2026-07-28 single exchange the SDK negotiates, and
    the initialize handshake earlier clients speak."""
    progress = Progress()
    async with over_http(stack, acme, mode) as client:
        result = await client.call_tool("ask", {"question": QUESTION}, progress_callback=progress)
    answer = structured(result)
    assert answer["status"] == "completed"
    assert "[1]" in answer["answer"]
    cited = {c["document_id"] for c in answer["citations"]}
    assert EXPECTED_DOCUMENT in cited
    first = answer["citations"][0]
    assert first["n"] == 1 and first["title"] == "The Lighthouse of Alexandria"
    assert set(first) >= {"n", "title", "document_id", "source", "page", "page_label", "section"}
    assert "Sources:" in text(result) and "[1] The Lighthouse of Alexandria" in text(result)
    messages = [m or "" for _, m in progress.seen]
    assert messages[0] == f"request {answer['request_id']} submitted"
    assert any(m.startswith("fusion completed") for m in messages), messages
    assert any(m.startswith("generation completed") for m in messages), messages
    assert messages[-1] == f"request {answer['request_id']} completed"
    counts = [p for p, _ in progress.seen]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)


async def test_search_gives_the_fused_passages(
    stack: Stack, acme: Tenant, acme_corpus: dict[str, str]
) -> None:
    progress = Progress()
    async with over_http(stack, acme) as client:
        result = await client.call_tool(
            "search", {"query": "bronze statue of Helios", "top_k": 3}, progress_callback=progress
        )
    found = structured(result)
    passages = found["passages"]
    assert 1 <= len(passages) <= 3
    assert passages[0]["document_id"] == "colossus-rhodes"
    assert passages[0]["title"] == "The Colossus of Rhodes"
    assert [p["rank"] for p in passages] == list(range(1, len(passages) + 1))
    scores = [p["score"] for p in passages]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0
    for passage in passages:
        assert passage["namespace"] == "default"
        assert "page" in passage and passage["channels"]
    assert "colossus-rhodes" in text(result)
    assert any((m or "").startswith("fusion completed") for _, m in progress.seen)


async def test_namespaces_and_documents_as_resources(
    stack: Stack, acme: Tenant, acme_corpus: dict[str, str]
) -> None:
    async with over_http(stack, acme) as client:
        spaces = structured(await client.call_tool("namespaces", {}))
        listed = await client.list_resources()
        notes = await client.read_resource("ragbus://documents/docs/field_notes.md")
        secret = await client.read_resource("ragbus://documents/docs/secret-plan")
        with pytest.raises(MCPError, match="no document 'nothing-here'"):
            await client.read_resource("ragbus://documents/docs/nothing-here")
        with pytest.raises(MCPError, match="no namespace"):
            await client.read_resource("ragbus://documents/acme__docs/secret-plan")
    counts = {n["namespace"]: n["documents"] for n in spaces["namespaces"]}
    assert counts["default"] == len(DOCUMENTS) and counts["docs"] == 2
    uris = {r.uri for r in listed.resources}
    assert "ragbus://documents/docs/field_notes.md" in uris
    assert "ragbus://documents/default/lighthouse-alexandria" in uris
    [file] = notes.contents
    assert isinstance(file, TextResourceContents)
    assert file.text == NOTES.decode() and file.mime_type == "text/markdown"
    [entry] = secret.contents
    assert isinstance(entry, TextResourceContents) and entry.mime_type == "application/json"
    assert json.loads(entry.text)["document_id"] == "secret-plan"


async def test_refusals_are_tool_errors_that_say_why(stack: Stack, acme: Tenant) -> None:
    slow = _tenant(stack, "slow", requests_per_s=0.01, burst=1)
    note = {"documents": [{"text": "One note."}]}
    async with over_http(stack, acme) as client:
        calls: dict[str, tuple[str, dict[str, Any]]] = {
            "404 not found: no ingest job 'no-such-job'": ("job_status", {"job_id": "no-such-job"}),
            "422 invalid: question": ("ask", {"question": ""}),
            "422 invalid: namespaces.0": ("ask", {"question": "hi", "namespaces": ["A B"]}),
            "give `documents` (text) or `files`": ("ingest", {"namespace": "docs"}),
            "is not base64": ("ingest", {"files": [{"filename": "a.pdf", "content_base64": "%"}]}),
            "415 unsupported file: ": (
                "ingest",
                {"files": [{"filename": "a.exe", "content_base64": "TVqQAAMAAAAEAAAA"}]},
            ),
        }
        for expected, (name, arguments) in calls.items():
            result = await client.call_tool(name, arguments)
            assert result.is_error, (name, arguments)
            assert expected in text(result), text(result)
    async with over_http(stack, slow) as client:
        assert not (await client.call_tool("ingest", note)).is_error
        refused = await client.call_tool("ingest", note)
    assert refused.is_error
    assert text(refused).startswith("429 too many requests: too many submissions")
    assert "(retry after " in text(refused)


async def test_every_http_request_needs_a_live_key(stack: Stack, acme: Tenant) -> None:
    """401 with `WWW-Authenticate` before any MCP exchange, for each POST, not only the first:
    a client already talking is refused at its next request once its key is rotated."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    rotating = _tenant(stack, "rotating")
    async with httpx.AsyncClient(base_url=stack.url) as http:
        for headers in ({}, {"Authorization": "Bearer rbk_wrong"}):
            refused = await http.post("/mcp", json=body, headers={**accept, **headers})
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"] == "Bearer"
            assert refused.json()["error"]["code"] == "unauthorized"
        listed = await http.post("/mcp", json=body, headers={**accept, **acme.headers})
        assert listed.status_code == 200, listed.text
        assert '"name":"ask"' in listed.text
        async with over_http(stack, rotating) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            admin = {"Authorization": f"Bearer {ADMIN}"}
            rotated = await http.post("/v1/admin/tenants/rotating/api-key", headers=admin)
            assert rotated.status_code == 200, rotated.text
            with pytest.raises(MCPError):
                await client.list_tools()
    async with over_http(stack, Tenant("rotating", rotated.json()["api_key"])) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS


# -- stdio: `ragbus mcp` -----------------------------------------------------------------------


async def test_ragbus_mcp_bridges_stdio_to_the_api(
    stack: Stack, acme: Tenant, acme_corpus: dict[str, str]
) -> None:
    """Everything through one `ragbus mcp`: the tools as the API lists them, a document
    ingested and followed to its end, then found by `ask` (its phases forwarded as progress)
    and `search`, and read as a resource."""
    document = {
        "document_id": "stdio-note",
        "title": "Kingfisher",
        "text": "The kingfisher survey of 2031 counted forty-two nests along the Wren River.",
    }
    progress = Progress()
    async with over_stdio(stack, acme.key) as client, over_http(stack, acme) as http:
        tools = (await client.list_tools()).tools
        assert tools == (await http.list_tools()).tools
        accepted = structured(
            await client.call_tool("ingest", {"documents": [document], "namespace": "bridge"})
        )
        await wait_job(client, accepted["job_id"])
        answer = structured(
            await client.call_tool(
                "ask",
                {
                    "question": "How many kingfisher nests did the survey count?",
                    "namespaces": ["bridge"],
                },
                progress_callback=progress,
            )
        )
        found = structured(
            await client.call_tool(
                "search", {"query": "kingfisher survey", "namespaces": ["bridge"]}
            )
        )
        spaces = structured(await client.call_tool("namespaces", {}))
        resource = await client.read_resource("ragbus://documents/bridge/stdio-note")
        templates = (await client.list_resource_templates()).resource_templates
        with pytest.raises(MCPError, match="no document"):
            await client.read_resource("ragbus://documents/bridge/nothing")
        missing_job = await client.call_tool("job_status", {"job_id": "nope"})
    assert {c["document_id"] for c in answer["citations"]} == {"stdio-note"}
    assert "forty-two" in answer["answer"]
    assert any((m or "").startswith("generation completed") for _, m in progress.seen)
    assert found["passages"][0]["document_id"] == "stdio-note"
    assert {"namespace": "bridge", "documents": 1} in spaces["namespaces"]
    assert json.loads(resource.contents[0].text)["document_id"] == "stdio-note"  # type: ignore[union-attr]
    assert templates[0].uri_template == "ragbus://documents/{namespace}/{document_id}"
    assert missing_job.is_error and "no ingest job 'nope'" in text(missing_job)


async def test_ragbus_mcp_says_why_its_key_is_refused(stack: Stack) -> None:
    async with over_stdio(stack, "rbk_not-a-key") as client:
        with pytest.raises(MCPError) as refused:
            await client.list_tools()
    message = str(refused.value)
    assert f"the ragbus API at {stack.mcp} answered 401" in message
    assert "RAGBUS_API_TOKEN" in message


async def test_ragbus_mcp_says_when_no_api_answers() -> None:
    """The stdio server stays up; each call says what it could not reach (and tries again)."""
    nowhere = Stack(f"http://127.0.0.1:{free_port()}", dict(os.environ))
    async with over_stdio(nowhere, "any") as client:
        for _ in range(2):
            with pytest.raises(MCPError, match=r"no ragbus API answers at .*ConnectError"):
                await client.list_tools()


# -- tenants -----------------------------------------------------------------------------------


async def test_a_tenant_reaches_nothing_of_another_through_mcp(
    stack: Stack, acme: Tenant, beta: Tenant, acme_corpus: dict[str, str]
) -> None:
    """beta, with its own key, over HTTP and over stdio: acme's documents are never found,
    its job and its documents answer as missing ones, and its namespaces are not listed."""
    question = {"question": "What is the Zephyr project codename?", "namespaces": ["docs"]}
    async with over_http(stack, beta) as client:
        asked = await client.call_tool("ask", question)
        searched = await client.call_tool(
            "search", {"query": "Zephyr project codename launch site"}
        )
        job = await client.call_tool("job_status", {"job_id": acme_corpus["secret"]})
        spaces = structured(await client.call_tool("namespaces", {}))
        listed = await client.list_resources()
        errors = []
        for uri in (
            "ragbus://documents/docs/secret-plan",
            "ragbus://documents/docs/field_notes.md",
            "ragbus://documents/default/lighthouse-alexandria",
        ):
            with pytest.raises(MCPError) as theirs:
                await client.read_resource(uri)
            errors.append(str(theirs.value))
    async with over_stdio(stack, beta.key) as bridged:
        with pytest.raises(MCPError, match="no document 'secret-plan' in namespace 'docs'"):
            await bridged.read_resource("ragbus://documents/docs/secret-plan")
        bridged_job = await bridged.call_tool("job_status", {"job_id": acme_corpus["notes"]})
    for result in (asked, searched):
        assert "BLUEFINCH" not in text(result) + json.dumps(result.structured_content)
        assert "secret-plan" not in json.dumps(result.structured_content)
    assert not searched.is_error and structured(searched)["passages"] == []
    for result in (job, bridged_job):
        assert result.is_error and text(result).startswith("404 not found: no ingest job")
    assert errors == [
        "no document 'secret-plan' in namespace 'docs'",
        "no document 'field_notes.md' in namespace 'docs'",
        "no document 'lighthouse-alexandria' in namespace 'default'",
    ]
    assert spaces == {"namespaces": []}
    assert listed.resources == []


# -- the MCP Inspector's CLI -------------------------------------------------------------------


def inspector(*args: str, env: dict[str, str] | None = None) -> Any:
    """`node index.js ARGS` where its 1.0.3 build must run (its own directory); its JSON."""
    if not (ROOT / "tools/mcp/node_modules").is_dir():
        pytest.skip("tools/mcp/node_modules is missing: `make mcp-peers` installs the Inspector")
    done = subprocess.run(
        ["node", "index.js", *args],
        cwd=INSPECTOR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_the_inspector_lists_calls_and_reads(
    stack: Stack, acme: Tenant, acme_corpus: dict[str, str], transport: str
) -> None:
    if transport == "http":
        target = [stack.mcp, "--transport", "http", "--header", f"Authorization: Bearer {acme.key}"]
        env = None
    else:  # the command after `--`: its own options are not the Inspector's
        target = [RAGBUS]
        env = {**stack.env, "RAGBUS_API_KEY": acme.key}

    def call(*args: str) -> Any:
        rest = ["--", "mcp", "--url", stack.url] if transport == "stdio" else []
        return inspector(*target, *args, *rest, env=env)

    listed = call("--method", "tools/list")
    assert {tool["name"] for tool in listed["tools"]} == TOOLS
    asked = call(
        "--method", "tools/call", "--tool-name", "ask", "--tool-arg", f"question={QUESTION}"
    )
    assert not asked.get("isError"), asked
    assert EXPECTED_DOCUMENT in {c["document_id"] for c in asked["structuredContent"]["citations"]}
    assert "[1]" in asked["content"][0]["text"]
    read = call("--method", "resources/read", "--uri", "ragbus://documents/docs/field_notes.md")
    assert read["contents"][0]["text"] == NOTES.decode()
    templates = call("--method", "resources/templates/list")
    assert templates["resourceTemplates"][0]["name"] == "document"


# -- token mode --------------------------------------------------------------------------------


async def test_token_mode_asks_for_the_token_on_mcp(tmp_path: Path) -> None:
    token = "the-api-token-of-the-mcp-suite-0123456789"
    with own_services(tmp_path, auth_mode="token", api_token=token) as settings:
        async with serving(create_app(settings)) as url:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
            accept = {"Accept": "application/json, text/event-stream"}
            async with httpx.AsyncClient() as http:
                for headers in ({}, {"Authorization": "Bearer wrong"}):
                    refused = await http.post(
                        f"{url}/mcp", json=body, headers={**accept, **headers}
                    )
                    assert refused.status_code == 401
                    assert refused.headers["www-authenticate"] == "Bearer"
            tenant = Tenant("default", token)
            async with over_http(Stack(url, {}), tenant) as client:
                assert {t.name for t in (await client.list_tools()).tools} == TOOLS
