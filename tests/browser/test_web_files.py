"""The page's files and how `api.web` serves them, without a browser or a stack: the security
headers, the content types `nosniff` depends on, no inline script or style for CSP to refuse,
no markup built from strings, and the form's options matching the contracts."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import get_args

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api import web
from api.app import create_app
from contracts.enums import Intent
from contracts.queries import MAX_TOP_K, QueryMode

STATIC = web.STATIC_DIR
HOOKS = (
    "query-input",
    "submit",
    "phase-row",
    "answer",
    "citation",
    "source-card",
    "confidence",
    "upload",
    "ingest-progress",
)


@pytest.fixture(scope="module")
def client() -> TestClient:
    app = FastAPI()
    app.include_router(web.router)
    return TestClient(app)


def test_the_page_and_its_files_come_with_a_strict_policy(client: TestClient) -> None:
    names = sorted(p.name for p in STATIC.iterdir() if p.is_file())
    assert {"index.html", "app.js", "app.css"} <= set(names)
    for path in ["/", *(f"/ui/{name}" for name in names)]:
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-security-policy"] == web.CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    policy = web.CONTENT_SECURITY_POLICY
    assert "script-src 'self';" in policy and "'unsafe-inline'" not in policy
    assert "frame-ancestors 'none'" in policy
    assert client.get("/").headers["content-type"].startswith("text/html")
    assert client.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/ui/app.css").headers["content-type"].startswith("text/css")


@pytest.mark.parametrize(
    "path", ["/ui/web.py", "/ui/..%2Fweb.py", "/ui/.hidden", "/ui/nope.js", "/ui/static/app.js"]
)
def test_nothing_else_is_served(client: TestClient, path: str) -> None:
    assert client.get(path).status_code in (404, 422)


def test_the_page_is_not_in_the_openapi_schema() -> None:
    paths = create_app().openapi()["paths"]
    assert "/" not in paths
    assert not [p for p in paths if p.startswith("/ui")]


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.options: dict[str, list[str]] = {}
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag == "select":
            self._select = attributes.get("id")
        elif tag == "option" and self._select:
            self.options.setdefault(self._select, []).append(attributes.get("value") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None


def _page() -> _Page:
    page = _Page()
    page.feed((STATIC / "index.html").read_text())
    return page


def test_no_inline_script_or_style() -> None:
    page = _page()
    for tag, attributes in page.tags:
        assert tag != "style", "a <style> element: CSP style-src 'self' refuses it"
        assert "style" not in attributes, f"<{tag} style=…>: CSP refuses inline styles"
        assert not [a for a in attributes if a.startswith("on")], f"<{tag}> has a handler"
        if tag == "script":
            assert (attributes.get("src") or "").startswith("/ui/"), "an inline script"


def test_the_form_offers_the_contracts_values() -> None:
    page = _page()
    assert page.options["intent"] == ["", *(i.value for i in Intent)]
    assert page.options["mode"] == list(get_args(QueryMode))
    top_k = next(a for t, a in page.tags if t == "input" and a.get("id") == "top-k")
    assert top_k["max"] == str(MAX_TOP_K)


def test_the_stable_hooks_exist_and_no_markup_is_built_from_strings() -> None:
    html = (STATIC / "index.html").read_text()
    scripts = {p.name: p.read_text() for p in STATIC.glob("*.js")}
    everything = html + "".join(scripts.values())
    for hook in HOOKS:
        assert f'data-testid="{hook}"' in everything or f'"data-testid": "{hook}"' in everything
    forbidden = re.compile(
        r"\.(innerHTML|outerHTML)\b|insertAdjacentHTML|document\.write|\beval\(|new Function|"
        r"createContextualFragment|\.setAttribute\(\s*[\"']style"
    )
    for name, text in scripts.items():
        source = re.sub(r"/\*.*?\*/|^\s*//.*$", "", text, flags=re.S | re.M)  # code, not comments
        assert not forbidden.search(source), f"{name}: {forbidden.search(source)}"
