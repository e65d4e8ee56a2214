"""A local OpenAI-compatible chat server for tests, speaking the real streaming wire format.

`POST /v1/chat/completions` with `stream: true` answers with `data: {chunk}` lines —
`choices[0].delta.content` pieces, `delta.tool_calls` fragments (index, id, function name,
arguments split across chunks), a `finish_reason` — and `data: [DONE]`. The request's
`model` picks a scripted behaviour:

- `cite`: an answer citing [1] and a bogus [9] (the marker split across chunks);
- `calculator`: asks for the calculator on the first round (the arithmetic found in the
  question), then answers with what the tool returned;
- `python`: asks for the python tool, then answers with its output;
- `greedy`: always asks for the calculator, whatever it is offered;
- `echo`: asks for the first offered tool whose name ends in `__echo` (an MCP server's
  `echo`, under its prefix) with the question as its `message`, then answers with what it
  returned; with no such tool offered, answers as `cite`;
- `fail500`: HTTP 500 every time;  `flaky`: 500 once per scenario, then `cite`;
- `hang`: sleeps far past any client timeout before answering;
- `break`: streams two tokens, then drops the connection;
- `empty`: a stream with no content and no tool call.

Ingestion-side tasks (told apart by their system prompt: entity extraction or community
summaries):

- `graph`: entities as JSON in a Markdown fence, one entry per `<passage index="n">` —
  capitalised spans ("Mayo Clinic") as `proper`, lower-case words of 10+ letters (met once,
  so the offline extractor misses them) title-cased as `term`, one name no passage mentions
  ("Quantum Gravity", kind `concept`), no acronyms, plus an entry for a passage that does not
  exist; summaries: "This community centres on <first two entities>. …";
- `graph_partial`: entities for passage 1 only;
- `graph_garbage`: prose instead of JSON, and an empty summary.

The critic's follow-up planning (its system prompt plans "follow-up searches"):

- `planner`: `{"queries": [...]}` in a fence, one per passage: the passage's first two-word
  capitalised span the question lacks, and the question's last word.

Every request body is kept in `requests` for assertions. Runs uvicorn in a thread so any
event loop (or none) can use it.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from infra.runtime.services import free_port

CITE_PIECES = [
    "JetStream stores ",
    "messages in streams on disk [",
    "1]. It was invented ",
    "on Mars [",
    "9].",
]
HANG_S = 30.0


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> str:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


def _text_stream(model: str, pieces: list[str]) -> list[str]:
    out = [_chunk(model, {"role": "assistant", "content": ""})]
    out += [_chunk(model, {"content": piece}) for piece in pieces]
    out.append(_chunk(model, {}, "stop"))
    out.append("data: [DONE]\n\n")
    return out


def _tool_stream(model: str, name: str, arguments: dict[str, Any], call_id: str) -> list[str]:
    raw = json.dumps(arguments)
    cut = max(1, len(raw) // 2)
    return [
        _chunk(model, {"role": "assistant", "content": None}),
        _chunk(
            model,
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ]
            },
        ),
        _chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": raw[:cut]}}]}),
        _chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": raw[cut:]}}]}),
        _chunk(model, {}, "tool_calls"),
        "data: [DONE]\n\n",
    ]


def _user_question(messages: list[dict[str, Any]]) -> str:
    user = next((m["content"] for m in messages if m.get("role") == "user"), "") or ""
    return user.rsplit("Question:", 1)[-1].strip()


def _tool_replies(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content") or "") for m in messages if m.get("role") == "tool"]


_ARITHMETIC = re.compile(r"[\d(][\d\s+\-*/().^]*[\d)]")
_PASSAGE = re.compile(r'<passage index="(\d+)">\n(.*?)\n</passage>', re.DOTALL)
_PROPER_SPAN = re.compile(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)+\b")
_LONG_WORD = re.compile(r"\b[a-z]{10,}\b")
GRAPH_MODELS = ("graph", "graph_partial", "graph_garbage")


def _offered_echo(tools: list[dict[str, Any]]) -> str | None:
    for tool in tools:
        name = str(tool.get("function", {}).get("name", ""))
        if name.endswith("__echo"):
            return name
    return None


def _system(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content")) for m in messages if m.get("role") == "system"), "")


def _graph_reply(model: str, messages: list[dict[str, Any]]) -> list[str]:
    """Entity extraction or a community summary, as the ingestion side asks for them."""
    user = next((str(m["content"]) for m in messages if m.get("role") == "user"), "")
    if "entity extraction" not in _system(messages):
        if model == "graph_garbage":
            return _text_stream(model, ["   "])
        entities = user.split("Entities:", 1)[-1].split("\n", 1)[0].strip()
        first = " and ".join(name.strip() for name in entities.split(",")[:2])
        return _text_stream(
            model, [f"This community centres on {first}. ", "It links the passages about them."]
        )
    if model == "graph_garbage":
        return _text_stream(model, ["Sure! The passages mention ", "several things."])
    chunks = []
    for index, text in _PASSAGE.findall(user):
        found = [{"name": span, "kind": "proper"} for span in _PROPER_SPAN.findall(text)]
        found += [{"name": w.title(), "kind": "term"} for w in _LONG_WORD.findall(text)]
        found.append({"name": "Quantum Gravity", "kind": "concept"})
        chunks.append({"index": int(index), "entities": found})
    if model == "graph_partial":
        chunks = chunks[:1]
    else:
        chunks.append({"index": 99, "entities": [{"name": "Nowhere", "kind": "proper"}]})
    raw = json.dumps({"chunks": chunks})
    cut = len(raw) // 2
    return _text_stream(model, ["Here you go:\n```json\n", raw[:cut], raw[cut:], "\n```"])


def _plan_reply(model: str, messages: list[dict[str, Any]]) -> list[str]:
    user = next((str(m["content"]) for m in messages if m.get("role") == "user"), "")
    passages, _, question = user.partition("Question:")
    last_word = question.strip().rstrip("?").split()[-1]
    queries = []
    for line in passages.splitlines():
        spans = [s for s in _PROPER_SPAN.findall(line.split(":", 1)[-1]) if s not in question]
        if spans:
            queries.append(f"{spans[0]} {last_word}")
    raw = json.dumps({"queries": queries})
    return _text_stream(model, ["```json\n", raw, "\n```"])


def _rewrite_reply(model: str, messages: list[dict[str, Any]]) -> list[str]:
    """`{"standalone": ...}`: the last question with its "it" replaced by the first turn's
    last word, so a test can tell the model's rewrite from the rules'."""
    user = next((str(m["content"]) for m in messages if m.get("role") == "user"), "")
    first = user.split("User: ", 1)[-1].splitlines()[0].rstrip("?").split()[-1]
    last = user.rsplit("Last question:", 1)[-1].strip()
    raw = json.dumps({"standalone": re.sub(r"\bit\b", first, last)})
    return _text_stream(model, ["Sure. ", raw])


def _research_reply(model: str, messages: list[dict[str, Any]]) -> list[str]:
    user = next((str(m["content"]) for m in messages if m.get("role") == "user"), "")
    question = user.rsplit("Question:", 1)[-1].strip()
    raw = json.dumps({"questions": [question, f"background of: {question}", "", 7]})
    return _text_stream(model, ["```json\n", raw, "\n```"])


class FakeLLM:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.failures: dict[str, int] = {}
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.app = self._build()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def calls_for(self, model: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r.get("model") == model]

    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions", response_model=None)
        async def completions(request: Request) -> StreamingResponse | JSONResponse:
            body = await request.json()
            self.requests.append(body)
            model = str(body.get("model", "cite"))
            messages = body.get("messages", [])
            if model == "fail500" or (model == "flaky" and not self.failures.get(model)):
                self.failures[model] = self.failures.get(model, 0) + 1
                return JSONResponse(
                    {"error": {"message": "scripted failure", "type": "server_error"}}, 500
                )
            if model == "hang":
                await asyncio.sleep(HANG_S)
            if model == "echo":
                echo = _offered_echo(body.get("tools") or [])
                if echo is not None and not _tool_replies(messages):
                    question = _user_question(messages)
                    frames = _tool_stream(model, echo, {"message": question}, "call_echo_1")
                else:
                    frames = self._script(model, messages, bool(body.get("tools")))
            else:
                frames = self._script(model, messages, bool(body.get("tools")))

            async def stream() -> AsyncIterator[str]:
                for number, frame in enumerate(frames):
                    if model == "break" and number == 3:
                        raise RuntimeError("scripted disconnect")
                    yield frame
                    await asyncio.sleep(0.005)

            return StreamingResponse(stream(), media_type="text/event-stream")

        return app

    @staticmethod
    def offered(body: dict[str, Any]) -> list[str]:
        """The names of the tools a recorded request offered."""
        return [tool["function"]["name"] for tool in body.get("tools") or []]

    def _script(self, model: str, messages: list[dict[str, Any]], tools: bool) -> list[str]:
        if model in GRAPH_MODELS:
            return _graph_reply(model, messages)
        if model == "planner" and "follow-up searches" in _system(messages):
            return _plan_reply(model, messages)
        if model == "rewriter" and "rewrite the last question" in _system(messages):
            return _rewrite_reply(model, messages)
        if model == "researcher" and "plan the research" in _system(messages):
            return _research_reply(model, messages)
        replies = _tool_replies(messages)
        question = _user_question(messages)
        if model in ("calculator", "greedy") and (model == "greedy" or (tools and not replies)):
            match = _ARITHMETIC.search(question)
            expression = match.group().strip() if match else "1 + 1"
            return _tool_stream(model, "calculator", {"expression": expression}, "call_calc_1")
        if model == "python" and tools and not replies:
            code = "print(sum(range(10)))"
            return _tool_stream(model, "python", {"code": code}, "call_py_1")
        if replies:
            return _text_stream(model, ["The tool says: ", replies[-1], "."])
        if model == "empty":
            return [_chunk(model, {}, "stop"), "data: [DONE]\n\n"]
        if model == "break":
            return _text_stream(model, ["Partial ", "answer ", "that ", "never ", "ends."])
        return _text_stream(model, CITE_PIECES)

    def start(self) -> None:
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_config=None, lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake LLM server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)


@contextmanager
def fake_llm() -> Iterator[FakeLLM]:
    server = FakeLLM()
    server.start()
    try:
        yield server
    finally:
        server.stop()
