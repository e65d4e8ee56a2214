"""The page's modules in chromium without a stack: the files are served by Playwright from
`api/static/` with the real headers, and events are made up, so the cases a real request
rarely shows are certain here: overlapping channels, a dropped channel, a retry's strategy,
a stream that resumes and is sent events it already applied, a retry's new draft."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlparse

import pytest
from playwright.async_api import Page, Route, async_playwright, expect

from api.web import MEDIA_TYPES, SECURITY_HEADERS, STATIC_DIR
from tests.browser.harness import PageWatch, launch, needs_chromium

pytestmark = needs_chromium

ORIGIN = "http://ragbus.test"
BLANK = (
    "<!doctype html><meta charset=utf-8><title>modules</title>"
    '<link rel="stylesheet" href="/ui/app.css"><div id="root" class="timeline"></div>'
)


def at(ms: int) -> str:
    return f"2026-01-01T00:00:{ms // 1000:02d}.{ms % 1000:03d}Z"


def phase(
    seq: int, name: str, status: str, start: int, end: int | None, attempt: int = 1, **meta: Any
) -> dict[str, Any]:
    return {
        "type": "phase",
        "seq": seq,
        "attempt": attempt,
        "request_id": "r1",
        # as the bus sends it: a finished phase's end is its event's own time
        "occurred_at": at(start if end is None else end),
        "data": {
            "phase": name,
            "status": status,
            "started_at": at(start),
            "duration_ms": None if end is None else float(end - start),
            "metadata": meta,
        },
    }


def sse(events: list[dict[str, Any]], retry_ms: int = 50) -> str:
    frames = [f"retry: {retry_ms}\n\n"]
    for event in events:
        sse_id = f"{event['seq']}.{event['part']}" if event.get("part") else str(event["seq"])
        frames.append(f"id: {sse_id}\nevent: {event['type']}\ndata: {json.dumps(event)}\n\n")
    return "".join(frames)


class Site:
    """`ORIGIN` as Playwright serves it: the static files, a blank page, and one SSE stream
    that ends early once, then replays too much."""

    def __init__(self) -> None:
        self.stream_requests = 0
        self.events = [
            {
                "type": "token",
                "seq": n,
                "attempt": 1,
                "request_id": "r1",
                "data": {"text": f"t{n} ", "index": n - 1},
            }
            for n in range(1, 5)
        ]
        # seq 2 is a message of two phase events, relayed as 2.1 and 2.2: the first
        # connection ends between them
        self.events[1:2] = [
            {
                "type": "phase",
                "seq": 2,
                "part": part,
                "attempt": 1,
                "request_id": "r1",
                "data": {"phase": phase_name, "status": "completed"},
            }
            for part, phase_name in ((1, "vector_search"), (2, "sparse_search"))
        ]
        self.events += [
            {
                "type": "done",
                "seq": 5,
                "attempt": 1,
                "request_id": "r1",
                "data": {"status": "completed"},
            }
        ]

    async def handle(self, route: Route) -> None:
        path = urlparse(route.request.url).path
        headers = dict(SECURITY_HEADERS)
        if path.startswith("/ui/"):
            file = STATIC_DIR / path.removeprefix("/ui/")
            headers["content-type"] = MEDIA_TYPES[file.suffix]
            await route.fulfill(status=200, headers=headers, body=file.read_bytes())
        elif path == "/stream":
            # the first connection: two events, then it ends; the next one replays from the
            # start (as a server that lost its place would), so the page must skip 1 and 2.
            # (Last-Event-ID is added below the interception layer: the proxy test sees it.)
            self.stream_requests += 1
            body = sse(self.events[:2] if self.stream_requests == 1 else self.events)
            await route.fulfill(
                status=200, headers={"content-type": "text/event-stream"}, body=body
            )
        else:
            headers["content-type"] = "text/html; charset=utf-8"
            await route.fulfill(status=200, headers=headers, body=BLANK)


@pytest.fixture
async def page() -> AsyncIterator[tuple[Page, Site, PageWatch]]:
    site, watch = Site(), PageWatch()
    async with async_playwright() as playwright:
        browser = await launch(playwright)
        context = await browser.new_context(viewport={"width": 1200, "height": 800})
        await context.route(f"{ORIGIN}/**", site.handle)
        page = await context.new_page()
        watch.attach(page)
        await page.goto(f"{ORIGIN}/")
        yield page, site, watch
        await browser.close()
    assert watch.page_errors == [] and watch.console == [], (watch.page_errors, watch.console)


async def test_the_waterfall_overlaps_channels_and_labels_attempts(
    page: tuple[Page, Site, PageWatch],
) -> None:
    tab, _, _ = page
    events = [
        phase(1, "intent_classification", "in_progress", 0, None),
        phase(2, "intent_classification", "completed", 0, 40, intent="factual"),
        phase(3, "vector_search", "in_progress", 50, None, channel="vector", query="q"),
        phase(4, "sparse_search", "in_progress", 52, None, channel="sparse", query="q"),
        phase(5, "graph_local_search", "in_progress", 55, None, channel="graph_local", query="q"),
        phase(6, "vector_search", "completed", 50, 150, channel="vector", query="q", count=20),
        phase(7, "sparse_search", "completed", 52, 120, channel="sparse", query="q", count=9),
        # the orchestrator drops the silent channel, with its own time stamp
        phase(
            8,
            "graph_local_search",
            "failed",
            400,
            400,
            reason="no answer within 0.3s",
            dropped=True,
            query="q",
        ),
        phase(9, "critic", "completed", 420, 430, verdict="retry", strategy="decompose"),
        phase(10, "retry", "completed", 431, 431, attempt=2, strategy="decompose"),
        phase(
            11,
            "vector_search",
            "in_progress",
            440,
            None,
            attempt=2,
            channel="vector",
            query="bridge entity",
        ),
    ]
    await tab.evaluate(
        """async (events) => {
            const { Timeline } = await import("/ui/timeline.js");
            const root = document.getElementById("root");
            const timeline = new Timeline(root);
            timeline.reset("q");
            for (const event of events) timeline.add(event);
            timeline.render();
            window.timeline = timeline;
        }""",
        events,
    )
    rows = tab.get_by_test_id("phase-row")
    await expect(rows).to_have_count(7)
    graph = tab.locator('[data-testid=phase-row][data-phase="graph_local_search"]')
    await expect(graph).to_have_count(1)  # the drop closed the running row: no second row
    await expect(graph).to_have_attribute("data-status", "dropped")
    await expect(graph).to_contain_text("reason: no answer within 0.3s")
    await expect(graph.locator(".duration")).to_have_text("345 ms")

    async def span(selector: str) -> tuple[float, float]:
        # Read the geometry in one synchronous step in the page: while a row runs, the
        # timeline re-renders every 250 ms, and a box read through a locator can land
        # between the element's resolution and its detachment (None on a loaded machine).
        edges: list[float] = await tab.evaluate(
            """(selector) => {
                const bar = document.querySelector(`${selector} .bar`);
                const box = bar.getBoundingClientRect();
                return [box.left, box.right];
            }""",
            selector,
        )
        return edges[0], edges[1]

    vector = await span('[data-phase="vector_search"][data-attempt="1"]')
    sparse = await span('[data-phase="sparse_search"]')
    assert sparse[0] < vector[1] and vector[0] < sparse[1], "parallel channels overlap"
    classify = await span('[data-phase="intent_classification"]')
    assert classify[1] <= vector[0] + 1, "classification ends before the searches start"

    second = tab.locator('.attempt[data-attempt="2"]')
    await expect(second.locator(".attempt-head")).to_have_text("Attempt 2decompose")
    await expect(second.locator('[data-phase="vector_search"]')).to_have_attribute(
        "data-status", "in_progress"
    )
    await expect(second).to_contain_text("query: bridge entity")
    await tab.evaluate("window.timeline.finish(); window.timeline.render()")
    await expect(second.locator('[data-phase="vector_search"]')).to_have_attribute(
        "data-status", "unfinished"
    )


async def test_a_resumed_stream_applies_each_sequence_once(
    page: tuple[Page, Site, PageWatch],
) -> None:
    tab, site, _ = page
    outcome = await tab.evaluate(
        """async () => {
            const { Follower } = await import("/ui/stream.js");
            return await new Promise((resolve) => {
                const applied = [];
                let ignored = 0, resumes = 0;
                const follower = new Follower("/stream", ["token", "phase", "done"], {
                    onEvent: (name, data, seq) => {
                        applied.push([name, seq, data.part ?? 0]);
                        if (name === "done") {
                            follower.close();
                            resolve({ applied, ignored, resumes });
                        }
                    },
                    onIgnored: (n) => { ignored = n; },
                    onResume: (n) => { resumes = n; },
                });
                setTimeout(() => resolve({ applied, ignored, resumes, timedOut: true }), 20000);
            });
        }"""
    )
    assert site.stream_requests == 2
    assert outcome == {
        "applied": [
            ["token", 1, 0],
            ["phase", 2, 1],
            ["phase", 2, 2],
            ["token", 3, 0],
            ["token", 4, 0],
            ["done", 5, 0],
        ],
        "ignored": 2,
        "resumes": 1,
    }


async def test_the_answer_renders_markers_as_buttons_and_text_as_text(
    page: tuple[Page, Site, PageWatch],
) -> None:
    tab, _, _ = page
    await tab.evaluate(
        """async () => {
            const { AnswerView } = await import("/ui/answer.js");
            const make = (tag) => document.getElementById("root").appendChild(
                document.createElement(tag));
            const view = new AnswerView({
                answer: make("div"), note: make("p"), sources: make("div"), facts: make("div"),
            });
            view.answerEl.dataset.testid = "answer";
            view.token({ text: "first attempt", index: 0 }, 1);
            view.token({ text: "second ", index: 0 }, 2);
            view.token({ text: "attempt", index: 1 }, 2);
            window.draft = view.answerEl.querySelector(".draft").textContent;
            view.answer({
                content: "Built by **<b>Goethals</b>** [1] and *not* [9].\\n\\nSee `<i>x</i>` [1].",
                citations: { 1: { chunk_id: "c1", document_id: "doc-1", title: "<em>T</em>",
                                  score: 0.5, channels: { sparse: 1, vector: 2 } } },
                metadata: { confidence: 0.9, intent: "factual", trace_id: "ab12" },
            });
        }"""
    )
    assert await tab.evaluate("window.draft") == "second attempt"
    answer = tab.get_by_test_id("answer")
    await expect(answer.locator("p")).to_have_count(2)
    await expect(answer.locator("strong")).to_have_text("<b>Goethals</b>")
    await expect(answer.locator("code")).to_have_text("<i>x</i>")
    await expect(answer.get_by_test_id("citation")).to_have_count(2)
    await expect(answer.locator(".dangling")).to_have_text("[9]")
    await expect(tab.locator("b, i, em:not(:is([data-testid=answer] em))")).to_have_count(0)
    card = tab.get_by_test_id("source-card")
    await expect(card.locator("h4")).to_have_text("<em>T</em>")
    await expect(card.locator(".ranks")).to_have_text("found by vector #2sparse #1")
    await answer.get_by_test_id("citation").first.click()
    await expect(card).to_have_attribute("data-active", "true")
    await expect(card).to_be_focused()
    await expect(tab.get_by_test_id("trace-id")).to_have_text("ab12")
    await expect(tab.get_by_test_id("confidence")).to_contain_text("0.90")


async def test_a_research_report_and_its_children_render_as_sections_and_rows(
    page: tuple[Page, Site, PageWatch],
) -> None:
    tab, _, _ = page
    await tab.evaluate(
        """async () => {
            const { AnswerView } = await import("/ui/answer.js");
            const { Timeline } = await import("/ui/timeline.js");
            const make = (tag) => document.getElementById("root").appendChild(
                document.createElement(tag));
            const view = new AnswerView({
                answer: make("div"), note: make("p"), sources: make("div"), facts: make("div"),
            });
            view.answerEl.dataset.testid = "answer";
            view.answer({
                content: "# Who built both?\\n\\n## <b>Who built the Pharos?</b>\\n\\n" +
                         "Sostratus [1].\\n\\n## Not answered\\n\\n- the Colossus: cancelled",
                citations: { 1: { chunk_id: "c1", document_id: "pharos", title: "Pharos" } },
                metadata: { mode: "research", children: ["a", "b"] },
            });
            const root = make("div");
            const timeline = new Timeline(root);
            timeline.reset("Who built both?");
            const at = (ms) => new Date(Date.UTC(2026, 0, 1, 0, 0, 0, ms)).toISOString();
            const step = (seq, status, started, ended, child) => ({
                seq, attempt: 1, occurred_at: at(ended ?? started),
                data: { phase: "research_step", status, started_at: at(started),
                        ended_at: ended === null ? null : at(ended),
                        duration_ms: ended === null ? null : 0,
                        metadata: { child_id: child, query: "q " + child } },
            });
            timeline.add(step(1, "in_progress", 0, null, "a"));
            timeline.add(step(2, "in_progress", 5, null, "b"));
            timeline.add(step(3, "completed", 900, 900, "a"));
            timeline.add(step(4, "failed", 1200, 1200, "b"));
            timeline.render();
            root.dataset.testid = "research-timeline";
        }"""
    )
    answer = tab.get_by_test_id("answer")
    await expect(answer.locator("h4")).to_have_text("Who built both?")
    await expect(answer.locator("h5")).to_have_count(2)
    await expect(answer.locator("h5").first).to_have_text("<b>Who built the Pharos?</b>")
    await expect(answer.locator("b")).to_have_count(0)
    await expect(answer.get_by_test_id("citation")).to_have_count(1)
    rows = tab.get_by_test_id("research-timeline").get_by_test_id("phase-row")
    await expect(rows).to_have_count(2)  # one row per child, from its start to its end
    await expect(rows.nth(0)).to_have_attribute("data-status", "completed")
    await expect(rows.nth(0).locator(".duration")).to_have_text("900 ms")
    await expect(rows.nth(1)).to_have_attribute("data-status", "failed")
