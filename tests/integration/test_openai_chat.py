"""The OpenAI-compatible door on the real bus, through clients nobody here wrote: the official
`openai` SDK (sync, async, streaming) and LiteLLM's `openai/` provider pointed at ragbus.

One stack for the module (the session's, corpus ingested) behind two apps: one in `token`
mode, one in `tenants` mode whose tenants are records in its Redis.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import redis.asyncio as aioredis

from infra.tenancy.registry import Limits, TenantRegistry
from launcher.runtime import Runtime
from tests.integration.conftest import serving
from tests.integration.polling import until

pytestmark = pytest.mark.integration

TOKEN = "openai-door-token-0123456789"
QUESTION = "Who built the Lighthouse of Alexandria?"
FOLLOW_UP = "When did earthquakes damage it?"
SPACE = "oai-space"
SECRET = "The Zephyr project codename is BLUEFINCH and its launch site is Kestrel Point."


def _app_settings(stack: Runtime, **overrides: Any) -> Any:
    # the suite offers a wrong key on purpose: slowing wrong keys is test_auth's to test
    return stack.settings.model_copy(update={"auth_failure_limit": 0, **overrides})


@pytest.fixture(scope="module")
async def url(stack: Runtime) -> AsyncIterator[str]:
    from api.app import create_app

    settings = _app_settings(stack, auth_mode="token", api_token=TOKEN)
    app = create_app(settings, broker=stack.broker, orchestrator=stack.orchestrator)
    async with serving(app) as served:
        async with httpx.AsyncClient(base_url=served, timeout=60, headers=_bearer(TOKEN)) as h:
            job = await h.post(
                "/v1/documents",
                json={
                    "documents": [
                        {"id": "zephyr", "title": "Zephyr", "text": SECRET, "namespace": SPACE}
                    ]
                },
            )
            assert job.status_code == 202, job.text
            await _finished(h, job.json()["job_id"])
        yield served


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _finished(http: httpx.AsyncClient, job_id: str) -> None:
    async def status() -> str:
        return str((await http.get(f"/v1/ingest/{job_id}")).json()["status"])

    assert await until(status, 120, satisfied=lambda s: s != "running") == "completed"


@pytest.fixture
async def client(url: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0) as made:
        yield made


@pytest.fixture
async def http(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=_bearer(TOKEN)) as made:
        yield made


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


# -- answers ------------------------------------------------------------------------------


async def test_an_answer_cites_its_sources_and_is_a_request(
    client: openai.AsyncOpenAI, http: httpx.AsyncClient
) -> None:
    completion = await client.chat.completions.create(
        model="ragbus",
        messages=[{"role": "system", "content": "Be brief."}, _user(QUESTION)],
        temperature=0.2,
        max_tokens=50,
    )
    content = completion.choices[0].message.content or ""
    assert "Sostratus" in content and "[1]" in content
    assert completion.choices[0].finish_reason == "stop"
    assert completion.object == "chat.completion" and completion.model == "ragbus"
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    citations = (completion.model_extra or {})["citations"]
    assert [c["n"] for c in citations] == sorted(c["n"] for c in citations)
    assert "lighthouse-alexandria" in {c["document_id"] for c in citations}
    assert all(f"[{c['n']}]" in content for c in citations)
    assert completion._request_id == completion.id
    view = (await http.get(f"/v1/queries/{completion.id}")).json()
    assert view["status"] == "completed" and view["query"] == QUESTION
    assert view["answer"]["content"] == content and view["session_id"] is None


async def test_a_stream_sends_the_answer_in_chunks_then_done(
    client: openai.AsyncOpenAI, http: httpx.AsyncClient
) -> None:
    stream = await client.chat.completions.create(
        model="ragbus",
        messages=[_user(QUESTION)],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) >= 3, texts
    finished = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finished] == ["stop"]
    assert "lighthouse-alexandria" in {
        c["document_id"] for c in (finished[0].model_extra or {})["citations"]
    }
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert len({c.id for c in chunks}) == 1
    view = (await http.get(f"/v1/queries/{chunks[0].id}")).json()
    assert view["status"] == "completed" and view["answer"]["content"] == "".join(texts)

    # OpenAI's wire format exactly: `data:` lines, no event names, `[DONE]` last
    body = {"model": "ragbus", "messages": [_user(QUESTION)], "stream": True}
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = "".join([text async for text in response.aiter_text()])
    blocks = [b for b in raw.split("\n\n") if b and not b.startswith(":")]
    assert all(b.startswith("data: ") and "\n" not in b for b in blocks), raw
    assert blocks[-1] == "data: [DONE]"
    assert json.loads(blocks[0][6:])["object"] == "chat.completion.chunk"


async def test_the_sync_sdk_and_litellm_get_the_same_door(url: str) -> None:
    def sync_calls() -> tuple[str, list[str]]:
        with openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0) as sync:
            done = sync.chat.completions.create(model="ragbus", messages=[_user(QUESTION)])
            streamed = sync.chat.completions.create(
                model="ragbus", messages=[_user(QUESTION)], stream=True
            )
            texts = [c.choices[0].delta.content or "" for c in streamed if c.choices]
        return done.choices[0].message.content or "", texts

    content, texts = await asyncio.to_thread(sync_calls)
    assert "Sostratus" in content and "Sostratus" in "".join(texts)

    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no network at import
    import litellm

    answered = await litellm.acompletion(
        model="openai/ragbus", api_base=f"{url}/v1", api_key=TOKEN, messages=[_user(QUESTION)]
    )
    assert "Sostratus" in answered.choices[0].message.content
    streamed = await litellm.acompletion(
        model="openai/ragbus",
        api_base=f"{url}/v1",
        api_key=TOKEN,
        messages=[_user(QUESTION)],
        stream=True,
    )
    pieces = [c.choices[0].delta.content or "" async for c in streamed if c.choices]
    assert len([p for p in pieces if p]) >= 2 and "Sostratus" in "".join(pieces)


# -- conversations ------------------------------------------------------------------------


async def test_a_follow_up_is_made_standalone_from_the_messages(
    client: openai.AsyncOpenAI, http: httpx.AsyncClient
) -> None:
    first = await client.chat.completions.create(model="ragbus", messages=[_user(QUESTION)])
    said = first.choices[0].message.content or ""
    conversation = [_user(QUESTION), {"role": "assistant", "content": said}, _user(FOLLOW_UP)]
    second = await client.chat.completions.create(model="ragbus", messages=conversation)
    assert "956" in (second.choices[0].message.content or "")
    view = (await http.get(f"/v1/queries/{second.id}")).json()
    assert view["query"] == FOLLOW_UP
    assert "Lighthouse of Alexandria" in view["standalone_query"]
    session_id = view["session_id"]
    assert session_id.startswith("oai-")
    turns = (await http.get(f"/v1/sessions/{session_id}")).json()["turns"]
    assert [t["query"] for t in turns] == [QUESTION, FOLLOW_UP]
    assert turns[0]["answer"] == said and turns[0]["request_id"].startswith("oai-")

    # asked again (a regenerated answer): a session of its own, not the first one's turns
    again = await client.chat.completions.create(model="ragbus", messages=conversation)
    other = (await http.get(f"/v1/queries/{again.id}")).json()
    assert other["session_id"] != session_id
    assert other["standalone_query"] == view["standalone_query"]


async def test_a_named_session_gains_only_the_turns_it_lacks(
    client: openai.AsyncOpenAI, http: httpx.AsyncClient
) -> None:
    session_id = f"chat-{uuid.uuid4().hex[:12]}"
    extra = {"session_id": session_id}
    first = await client.chat.completions.create(
        model="ragbus", messages=[_user(QUESTION)], extra_body=extra
    )
    said = first.choices[0].message.content or ""
    conversation = [_user(QUESTION), {"role": "assistant", "content": said}, _user(FOLLOW_UP)]
    second = await client.chat.completions.create(
        model="ragbus", messages=conversation, extra_body=extra
    )
    view = (await http.get(f"/v1/queries/{second.id}")).json()
    assert view["session_id"] == session_id
    assert "Lighthouse of Alexandria" in view["standalone_query"]

    async def turns() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (await http.get(f"/v1/sessions/{session_id}")).json()["turns"]
        return found

    found = await until(turns, satisfied=lambda ts: all(t["answer"] for t in ts))
    assert [t["request_id"] for t in found] == [first.id, second.id]  # no copy of turn one


# -- models and errors --------------------------------------------------------------------


async def test_the_model_chooses_the_namespace(client: openai.AsyncOpenAI) -> None:
    listed = [m.id async for m in client.models.list()]
    assert listed[0] == "ragbus" and f"ragbus:{SPACE}" in listed
    model = await client.models.retrieve(f"ragbus:{SPACE}")
    assert model.id == f"ragbus:{SPACE}" and (model.model_extra or {})["documents"] == 1
    question = [_user("What is the Zephyr project codename?")]
    there = await client.chat.completions.create(model=f"ragbus:{SPACE}", messages=question)
    assert "BLUEFINCH" in (there.choices[0].message.content or "")
    assert {c["document_id"] for c in (there.model_extra or {})["citations"]} == {"zephyr"}
    default = await client.chat.completions.create(model="ragbus", messages=question)
    assert "BLUEFINCH" not in (default.choices[0].message.content or "")


async def test_errors_are_openai_errors(url: str, client: openai.AsyncOpenAI) -> None:
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError) as refused:
            await bad.chat.completions.create(model="ragbus", messages=[_user(QUESTION)])
        with pytest.raises(openai.AuthenticationError):
            await bad.models.list()
    assert refused.value.code == "invalid_api_key"

    with pytest.raises(openai.NotFoundError) as missing:
        await client.chat.completions.create(model="gpt-4o", messages=[_user(QUESTION)])
    assert missing.value.code == "model_not_found" and missing.value.param == "model"
    with pytest.raises(openai.NotFoundError):
        await client.models.retrieve("gpt-4o")

    with pytest.raises(openai.UnprocessableEntityError) as many:
        await client.chat.completions.create(model="ragbus", messages=[_user(QUESTION)], n=2)
    assert many.value.param == "n"
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    with pytest.raises(openai.UnprocessableEntityError) as seen:
        await client.chat.completions.create(
            model="ragbus",
            messages=[{"role": "user", "content": [{"type": "text", "text": "What?"}, image]}],
        )
    assert "image_url" in seen.value.message
    with pytest.raises(openai.UnprocessableEntityError):
        await client.chat.completions.create(
            model="ragbus", messages=[{"role": "assistant", "content": "Hello."}]
        )


# -- tenants ------------------------------------------------------------------------------


@dataclass
class Tenants:
    url: str
    acme: str
    beta: str
    slow: str


@pytest.fixture(scope="module")
async def tenants(stack: Runtime) -> AsyncIterator[Tenants]:
    from api.app import create_app

    suffix = uuid.uuid4().hex[:6]
    redis = aioredis.from_url(stack.settings.redis_url, decode_responses=True)
    registry = TenantRegistry(redis)
    keys = []
    for name, limits in (
        ("acme", None),
        ("beta", None),
        ("slow", Limits(requests_per_s=0.01, burst=1)),
    ):
        _, key = await registry.create(f"oai-{name}-{suffix}", "A" * 56, limits)
        keys.append(key)
    await redis.aclose()
    settings = _app_settings(stack, auth_mode="tenants")
    app = create_app(settings, broker=stack.broker, orchestrator=stack.orchestrator)
    async with serving(app) as served:
        made = Tenants(served, *keys)
        async with httpx.AsyncClient(base_url=served, timeout=60, headers=_bearer(made.acme)) as h:
            job = await h.post(
                "/v1/documents",
                json={
                    "documents": [
                        {"id": "zephyr", "title": "Zephyr", "text": SECRET, "namespace": "secret"}
                    ]
                },
            )
            assert job.status_code == 202, job.text
            await _finished(h, job.json()["job_id"])
        yield made


async def test_a_tenant_reaches_nothing_of_another(tenants: Tenants) -> None:
    base = f"{tenants.url}/v1"
    question = [_user("What is the Zephyr project codename?")]
    session_id = f"shared-{uuid.uuid4().hex[:8]}"
    async with (
        openai.AsyncOpenAI(base_url=base, api_key=tenants.acme, max_retries=0) as acme,
        openai.AsyncOpenAI(base_url=base, api_key=tenants.beta, max_retries=0) as beta,
        httpx.AsyncClient(base_url=tenants.url, headers=_bearer(tenants.beta)) as beta_http,
    ):
        assert "ragbus:secret" in [m.id async for m in acme.models.list()]
        assert [m.id async for m in beta.models.list()] == ["ragbus"]
        own = await acme.chat.completions.create(
            model="ragbus:secret", messages=question, extra_body={"session_id": session_id}
        )
        assert "BLUEFINCH" in (own.choices[0].message.content or "")

        other = await beta.chat.completions.create(model="ragbus:secret", messages=question)
        assert "BLUEFINCH" not in (other.choices[0].message.content or "")
        assert not (other.model_extra or {})["citations"]
        assert (await beta_http.get(f"/v1/queries/{own.id}")).status_code == 404
        assert (await beta_http.get(f"/v1/sessions/{session_id}")).status_code == 404

        # the same session id is another conversation: acme's turn is not beta's to follow
        follow = await beta.chat.completions.create(
            model="ragbus:secret",
            messages=[_user("What is its launch site?")],
            extra_body={"session_id": session_id},
        )
        view = (await beta_http.get(f"/v1/queries/{follow.id}")).json()
        assert "Zephyr" not in (view["standalone_query"] or "")
        assert "Kestrel" not in (follow.choices[0].message.content or "")
        turns = (await beta_http.get(f"/v1/sessions/{session_id}")).json()["turns"]
        assert [t["request_id"] for t in turns] == [follow.id]


async def test_past_its_rate_a_tenant_is_told_when_to_come_back(tenants: Tenants) -> None:
    async with openai.AsyncOpenAI(
        base_url=f"{tenants.url}/v1", api_key=tenants.slow, max_retries=0
    ) as slow:
        await slow.chat.completions.create(model="ragbus", messages=[_user(QUESTION)])
        with pytest.raises(openai.RateLimitError) as limited:
            await slow.chat.completions.create(model="ragbus", messages=[_user(QUESTION)])
    assert limited.value.code == "rate_limit_exceeded"
    assert int(limited.value.response.headers["Retry-After"]) >= 1
    assert limited.value.body["type"] == "rate_limit_error"  # type: ignore[index]
