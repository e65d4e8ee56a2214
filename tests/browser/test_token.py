"""The web page against a `ragbus up` that needs a bearer token (RAGBUS_API_TOKEN): it asks
for the token once, keeps it for the tab, and its event streams are authorized by the cookie
it sets (EventSource cannot send a header)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import async_playwright, expect

from tests.browser.harness import (
    UI_TIMEOUT_MS,
    PageWatch,
    Stack,
    launch,
    needs_chromium,
    running_stack,
)

pytestmark = [pytest.mark.integration, needs_chromium]

TOKEN = "page-test-token-7f3a"
TEXT = "The Hynish signal tower let the Skerryvore keepers talk to the shore by semaphore."


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("web-token"), RAGBUS_API_TOKEN=TOKEN) as running:
        running.headers = {"Authorization": f"Bearer {TOKEN}"}
        yield running


async def test_the_page_asks_for_the_token_once_then_works(stack: Stack, tmp_path: Path) -> None:
    stack.ingest([{"id": "hynish", "title": "Hynish", "text": TEXT, "namespace": "signals"}])
    watch = PageWatch()
    async with async_playwright() as playwright:
        browser = await launch(playwright)
        context = await browser.new_context(viewport={"width": 1000, "height": 900})
        context.set_default_timeout(UI_TIMEOUT_MS)
        page = await context.new_page()
        watch.attach(page)
        await page.goto(f"{stack.url}/")

        form = page.get_by_test_id("token-form")
        await expect(form).to_be_visible()
        await expect(page.locator("#token-input")).to_be_focused()
        await expect(page.get_by_test_id("whoami")).to_have_text("not signed in")

        await page.get_by_test_id("token-input").fill("wrong-token")
        await page.get_by_test_id("token-submit").click()
        await expect(form).to_contain_text("The API refused it: missing or invalid bearer token")
        await page.get_by_test_id("token-input").fill(TOKEN)
        await page.get_by_test_id("token-submit").click()
        await expect(form).to_be_hidden()
        await expect(page.get_by_test_id("whoami")).to_have_text("tenant default · auth token")

        # an error from the API is shown as the API wrote it
        await page.get_by_test_id("namespaces").fill("Not A Namespace")
        await page.get_by_test_id("query-input").fill("Who talked by semaphore?")
        await page.get_by_test_id("submit").click()
        await expect(page.get_by_test_id("alert")).to_contain_text(
            "validation_error: namespaces.0: invalid namespace 'Not A Namespace'"
        )

        # the stream (EventSource: no header, the cookie) is authorized
        await page.get_by_test_id("namespaces").fill("signals")
        await page.get_by_test_id("submit").click()
        await expect(page.locator("#run")).to_have_attribute("data-status", "completed")
        await expect(page.get_by_test_id("answer")).to_have_attribute("data-state", "final")
        await expect(page.get_by_test_id("source-card")).to_contain_text("hynish")
        await expect(page.get_by_test_id("history-item")).to_have_count(1)
        await page.screenshot(path=tmp_path / "token.png", full_page=True)

        # kept for the tab: a reload does not ask again
        await page.reload()
        await expect(page.locator("body")).to_have_attribute("data-ready", "true")
        await expect(form).to_be_hidden()
        assert await page.evaluate("sessionStorage.getItem('ragbus.token')") == TOKEN
        cookies = await context.cookies(f"{stack.url}/v1/whoami")
        assert [(c["name"], c["value"], c["path"], c["sameSite"]) for c in cookies] == [
            ("ragbus_token", TOKEN, "/v1", "Strict")
        ]
        await browser.close()

    # chromium logs each refused request (the 401s before the token, the 422): nothing else
    assert watch.page_errors == []
    refused = re.compile(r"^error: Failed to load resource: .* status of (401|422) ")
    assert [line for line in watch.console if not refused.match(line)] == []
    assert len(watch.console) <= 4, watch.console
