"""Files through the web page (issue 46), in Debian's chromium against a real `ragbus up`:
a PDF and a Markdown file dropped on the drop zone go up as one `multipart/form-data`
request; each file's row shows its upload, then its parse ("2 pages" for the PDF), then
indexed. A file of a kind that is not read is refused in the page, with a sentence, and never
sent."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from fpdf import FPDF
from playwright.async_api import Browser, FilePayload, Page, Request, async_playwright, expect

from tests.browser.harness import (
    CSP_WATCH,
    UI_TIMEOUT_MS,
    PageWatch,
    Stack,
    launch,
    needs_chromium,
    running_stack,
)

pytestmark = [pytest.mark.integration, needs_chromium]

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
NOTES = """# Hynish signal tower

The keepers of Skerryvore talked to the shore station at Hynish by semaphore, from a signal
tower built in 1844 beside the harbour.
"""
EXE = b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff\x00\x00" + b"\x00" * 48

SENT_FORMS = """
window.__sentForms = [];
const send = XMLHttpRequest.prototype.send;
XMLHttpRequest.prototype.send = function (body) {
  if (body instanceof FormData) {
    const parts = [...body.entries()];
    window.__sentForms.push(parts.map(([k, v]) => (v instanceof File ? `${k}:${v.name}` : k)));
  }
  return send.call(this, body);
};
"""
WATCH_ROWS = """() => {
    window.__rowStates = {};
    new MutationObserver((records) => {
        for (const record of records) {
            const row = record.target.closest?.("[data-testid=upload-file]");
            if (!row) continue;
            const seen = (window.__rowStates[row.dataset.name] ||= []);
            const text = row.querySelector("[data-testid=file-state]").textContent;
            if (seen.at(-1) !== text) seen.push(text);
        }
    }).observe(document.querySelector("#uploads"), {
        subtree: true, attributes: true, attributeFilter: ["data-state"],
    });
}"""
DROP = """async ([zone, files]) => {
    const transfer = new DataTransfer();
    for (const [name, type, data] of files) {
        const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
        transfer.items.add(new File([bytes], name, { type }));
    }
    const zoneEl = document.querySelector(zone);
    const drag = (name) => zoneEl.dispatchEvent(
        new DragEvent(name, { bubbles: true, cancelable: true, dataTransfer: transfer }),
    );
    drag("dragenter");
    drag("dragover");
    const over = zoneEl.dataset.over === "true"
        && getComputedStyle(zoneEl.querySelector(".drop-release")).display !== "none";
    drag("drop");
    return over;
}"""


def report_pdf() -> bytes:
    pdf = FPDF()
    pdf.add_font("DejaVu", fname=str(FONT))
    pdf.set_font("DejaVu", size=12)
    pages = [
        "Skerryvore lighthouse survey. The granite tower is 48 metres tall and was first lit "
        "in 1844, to a design by Alan Stevenson.",
        "Maintenance. The lamp was converted to automatic operation in 1994; the keepers left "
        "the rock that year.",
    ]
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    return bytes(pdf.output())


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("web-files")) as running:
        yield running


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        chromium = await launch(playwright)
        yield chromium
        await chromium.close()


async def open_page(browser: Browser, url: str, watch: PageWatch) -> Page:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = await context.new_page()
    watch.attach(page)
    await page.add_init_script(CSP_WATCH)
    await page.goto(url)
    await expect(page.locator("body")).to_have_attribute("data-ready", "true")
    return page


def _file(name: str, media_type: str, data: bytes) -> list[str]:
    return [name, media_type, base64.b64encode(data).decode()]


async def test_dropped_files_upload_parse_and_index_and_an_exe_is_refused(
    stack: Stack, browser: Browser
) -> None:
    namespace = "web-files"
    watch = PageWatch()
    page = await open_page(browser, f"{stack.url}/", watch)
    posts: list[Request] = []
    await page.add_init_script(SENT_FORMS)
    await page.reload()
    await expect(page.locator("body")).to_have_attribute("data-ready", "true")
    page.on(
        "request",
        lambda r: posts.append(r) if r.method == "POST" and "/v1/documents" in r.url else None,
    )
    await page.get_by_test_id("doc-namespace").fill(namespace)

    files = [
        _file("report.pdf", "application/pdf", report_pdf()),
        _file("hynish notes.md", "text/markdown", NOTES.encode()),
        _file("setup.exe", "application/x-msdownload", EXE),
    ]
    await page.evaluate(WATCH_ROWS)
    shown_over = await page.evaluate(DROP, ["#drop", files])
    assert shown_over, "the drop zone showed its drop state while files were over it"
    await expect(page.get_by_test_id("drop-zone")).not_to_have_attribute("data-over", "true")

    rows = page.get_by_test_id("upload-file")
    await expect(rows).to_have_count(3)
    exe = page.locator('[data-testid=upload-file][data-name="setup.exe"]')
    await expect(exe).to_have_attribute("data-state", "refused")
    await expect(exe.get_by_test_id("file-state")).to_have_text(
        "setup.exe is a .exe file, which cannot be read: upload PDF, Word (.docx), PowerPoint "
        "(.pptx), HTML, images (PNG, JPEG, TIFF), Markdown or text files "
        "(.pdf .png .jpg .jpeg .tif .tiff .docx .pptx .html .htm .md .markdown .txt)."
    )
    await expect(exe.get_by_test_id("upload-progress")).to_be_hidden()

    pdf = page.locator('[data-testid=upload-file][data-name="report.pdf"]')
    notes = page.locator('[data-testid=upload-file][data-name="hynish notes.md"]')
    await expect(notes).to_have_attribute("data-document", "hynish_notes.md")
    for row in (pdf, notes):
        await expect(row).to_have_attribute("data-state", "indexed")
        bar = row.get_by_test_id("upload-progress")
        value, maximum = await bar.evaluate("p => [p.value, p.max]")
        assert value == maximum > 1
    pdf_done = "indexed · 2 pages"
    await expect(pdf.get_by_test_id("file-state")).to_have_text(pdf_done)
    await expect(notes.get_by_test_id("file-state")).to_have_text("indexed")
    # each file's row went through its stages in order: its bytes, its parse, its index
    states = await page.evaluate("window.__rowStates")
    assert states["report.pdf"][-3:] == ["queued for parsing", "parsed: 2 pages", pdf_done]
    assert states["hynish notes.md"][-3:] == ["queued for parsing", "parsed", "indexed"]
    for name in ("report.pdf", "hynish notes.md"):
        assert states[name][0].startswith("uploading "), states
    # one job for the two files, which ended completed
    job = await pdf.get_attribute("data-job")
    assert job and job == await notes.get_attribute("data-job")
    progress = page.locator(f'[data-testid=ingest-progress][data-job="{job}"]')
    await expect(progress).to_have_attribute("data-status", "completed")

    # one multipart request, with the two files and never the refused one
    assert len(posts) == 1, [p.url for p in posts]
    [post] = posts
    assert (await post.header_value("content-type") or "").startswith("multipart/form-data")
    # what the page put in the form (the browser does not show Playwright a body of files)
    assert await page.evaluate("window.__sentForms") == [
        ["namespace", "files:report.pdf", "files:hynish notes.md"]
    ]
    listed = page.get_by_test_id("document")
    await expect(listed).to_have_count(2)
    assert set(await listed.evaluate_all("li => li.map(x => x.dataset.id)")) == {
        "report.pdf",
        "hynish_notes.md",
    }
    assert await page.evaluate("window.__cspViolations") == []
    assert watch.page_errors == [], watch.page_errors
    assert watch.console == [], watch.console


async def test_a_file_the_api_refuses_fails_its_row_with_the_reason(
    stack: Stack, browser: Browser
) -> None:
    """Named .pdf but HTML inside: the page sends it (the name is of a kind read), the API
    refuses the batch (415), and the row says why."""
    watch = PageWatch()
    page = await open_page(browser, f"{stack.url}/", watch)
    await page.get_by_test_id("doc-namespace").fill("web-files-bad")
    fake = b"<!doctype html><html><body><p>Not a PDF at all.</p></body></html>"
    payload: FilePayload = {"name": "fake.pdf", "mimeType": "application/pdf", "buffer": fake}
    await page.get_by_test_id("upload").set_input_files([payload])
    row = page.locator('[data-testid=upload-file][data-name="fake.pdf"]')
    await expect(row).to_have_attribute("data-state", "failed")
    await expect(row.get_by_test_id("file-state")).to_contain_text("fake.pdf")
    await expect(row.get_by_test_id("file-state")).to_contain_text("HTML")
    await expect(page.get_by_test_id("alert")).to_contain_text("fake.pdf")
    assert watch.page_errors == [], watch.page_errors
    # the browser logs the refused request itself
    assert [m for m in watch.console if "415" not in m] == [], watch.console
