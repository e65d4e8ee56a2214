"""A citation's page and section on the web page (issue 46), in chromium without a stack, as
`test_page_modules` serves the page's modules: the source card shows "p. 3 · Methods" beside
the title, the page links to the original file (`GET /v1/documents/{id}`, at the page for a
PDF), and a text document's citation shows its section only, with no link."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlparse

import pytest
from playwright.async_api import BrowserContext, Page, Route, async_playwright, expect

from api.web import MEDIA_TYPES, SECURITY_HEADERS, STATIC_DIR
from tests.browser.harness import PageWatch, launch, needs_chromium

pytestmark = needs_chromium

ORIGIN = "http://ragbus.test"
BLANK = (
    "<!doctype html><meta charset=utf-8><title>citations</title>"
    '<link rel="stylesheet" href="/ui/app.css"><div id="root"></div>'
)


class Site:
    """The static files, a blank page, and the documents route, which records its calls."""

    def __init__(self) -> None:
        self.fetched: list[tuple[str, str]] = []

    async def handle(self, route: Route) -> None:
        url = urlparse(route.request.url)
        headers = dict(SECURITY_HEADERS)
        if url.path.startswith("/ui/"):
            file = STATIC_DIR / url.path.removeprefix("/ui/")
            headers["content-type"] = MEDIA_TYPES[file.suffix]
            await route.fulfill(status=200, headers=headers, body=file.read_bytes())
        elif url.path.startswith("/v1/documents/"):
            sent = await route.request.all_headers()
            self.fetched.append((f"{url.path}?{url.query}", sent.get("cookie", "")))
            headers["content-type"] = "text/plain; charset=utf-8"
            await route.fulfill(status=200, headers=headers, body="the original file")
        else:
            headers["content-type"] = "text/html; charset=utf-8"
            await route.fulfill(status=200, headers=headers, body=BLANK)


@pytest.fixture
async def page() -> AsyncIterator[tuple[Page, BrowserContext, Site, PageWatch]]:
    site, watch = Site(), PageWatch()
    async with async_playwright() as playwright:
        browser = await launch(playwright)
        context = await browser.new_context(viewport={"width": 1200, "height": 800})
        await context.route(f"{ORIGIN}/**", site.handle)
        page = await context.new_page()
        watch.attach(page)
        await page.goto(f"{ORIGIN}/")
        yield page, context, site, watch
        await browser.close()
    assert watch.page_errors == [] and watch.console == [], (watch.page_errors, watch.console)


async def test_a_citation_shows_its_page_and_section_and_opens_the_file(
    page: tuple[Page, BrowserContext, Site, PageWatch],
) -> None:
    tab, context, site, _ = page
    await tab.evaluate(
        """async () => {
            document.cookie = "ragbus_token=tok-1; path=/v1; SameSite=Strict";
            const { AnswerView } = await import("/ui/answer.js");
            const make = (tag) => document.getElementById("root").appendChild(
                document.createElement(tag));
            const view = new AnswerView({
                answer: make("div"), note: make("p"), sources: make("div"), facts: make("div"),
            });
            view.answer({
                content: "Measured [1], noted [2], shown [3].",
                citations: {
                    1: { chunk_id: "c1", document_id: "report <1>.pdf", title: "report.pdf",
                         page: 3, page_label: "p. 3", section: "Study > <b>Methods</b>",
                         namespace: "my docs", score: 0.5 },
                    2: { chunk_id: "c2", document_id: "notes", title: "Notes",
                         section: "Top > Sub", score: 0.4 },
                    3: { chunk_id: "c3", document_id: "deck", title: "deck.pptx",
                         page: 2, page_label: "slide 2", namespace: "default", score: 0.3 },
                },
                metadata: {},
            });
        }"""
    )
    cards = tab.get_by_test_id("source-card")
    await expect(cards).to_have_count(3)
    first, second, third = cards.nth(0), cards.nth(1), cards.nth(2)
    await expect(first.locator("h4")).to_have_text("report.pdf")
    await expect(first.get_by_test_id("source-place")).to_have_text("p. 3 · <b>Methods</b>")
    await expect(first.get_by_test_id("source-section")).to_have_attribute(
        "title", "Study > <b>Methods</b>"
    )
    await expect(tab.locator("#root b")).to_have_count(0)  # text stays text
    link = first.get_by_test_id("source-page")
    await expect(link).to_have_attribute(
        "href", "/v1/documents/report%20%3C1%3E.pdf?namespace=my%20docs#page=3"
    )
    await expect(link).to_have_attribute("rel", "noopener noreferrer")
    # a text document: its section, no page, no link
    await expect(second.get_by_test_id("source-place")).to_have_text("Sub")
    await expect(second.locator("a")).to_have_count(0)
    # a slide: the file, not at a PDF page
    await expect(third.get_by_test_id("source-page")).to_have_attribute(
        "href", "/v1/documents/deck?namespace=default"
    )
    await expect(tab.get_by_test_id("citation").first).to_have_attribute(
        "title", "report.pdf · p. 3 · <b>Methods</b>"
    )
    async with context.expect_page() as opened:
        await link.click()
    popup = await opened.value
    await popup.wait_for_load_state()
    assert urlparse(popup.url).fragment == "page=3"
    assert site.fetched[0][0] == "/v1/documents/report%20%3C1%3E.pdf?namespace=my%20docs"
    assert "ragbus_token=tok-1" in site.fetched[0][1]  # the token rides in its cookie
