"""`/docs` in chromium without a stack or internet: Playwright hands every request to the app
in process (`api.app.create_app`, no lifespan) and refuses any other origin, so Swagger UI must
come from this origin, run under the page's strict Content-Security-Policy, and show the
API's operations."""

from __future__ import annotations

import httpx
from playwright.async_api import Route, async_playwright, expect

from api.app import create_app
from infra.settings import Settings
from tests.browser.harness import CSP_WATCH, PageWatch, launch, needs_chromium

pytestmark = needs_chromium

ORIGIN = "http://ragbus.test"


async def test_the_reference_renders_offline_under_the_strict_policy() -> None:
    app = create_app(Settings())
    elsewhere: list[str] = []
    watch = PageWatch()
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=ORIGIN) as http,
        async_playwright() as playwright,
    ):

        async def handle(route: Route) -> None:
            request = route.request
            if not request.url.startswith(f"{ORIGIN}/"):
                elsewhere.append(request.url)
                await route.abort()
                return
            answer = await http.request(request.method, request.url, headers=request.headers)
            await route.fulfill(
                status=answer.status_code, headers=dict(answer.headers), body=answer.content
            )

        browser = await launch(playwright)
        context = await browser.new_context(viewport={"width": 1200, "height": 900})
        await context.route("**/*", handle)
        await context.add_init_script(CSP_WATCH)
        page = await context.new_page()
        watch.attach(page)
        await page.goto(f"{ORIGIN}/docs")
        await expect(page.locator(".swagger-ui .info .title")).to_contain_text("ragbus")
        operation = page.locator(".opblock-summary-path", has_text="/v1/queries").first
        await expect(operation).to_be_visible()
        violations = await page.evaluate("window.__cspViolations")
        await browser.close()
    assert elsewhere == []
    assert violations == []
    assert watch.page_errors == [] and watch.console == [], (watch.page_errors, watch.console)
