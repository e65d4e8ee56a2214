"""A web site as a source (`kind: web`): the pages its sitemap lists, else those a crawl within
its host finds; robots.txt honoured; a page's version from its validators, never its body.

- The sitemap: the location itself when it is one (`…/sitemap.xml`), else the ones the
  site's robots.txt names (`Sitemap:` lines), else `/sitemap.xml`. Sitemap indexes are
  followed one level down. A page's version is its `<lastmod>` when the sitemap gives one
  (listing it costs nothing more), else its ETag or Last-Modified from a HEAD request (no
  body). A page with neither is read each sync, and only sent when its bytes changed.
- Without a sitemap (and with `web.crawl`), pages are found by following links from the
  location within its host, up to `web.max_pages`; each page is read once per sync.
- A page that answers 404 or 410 is gone (its document is deleted); one that fails otherwise
  is kept as it was. A redirect within the host is followed, and the page is listed under
  the address it ends at; one out of the host is not followed.
- Every request is checked first (`infra.sources.network`): public hosts only, unless the
  operator names a private one.
"""

from __future__ import annotations

import hashlib
import mimetypes
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urldefrag, urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import httpx
from lxml import etree
from lxml import html as lxml_html

from contracts.sources import SourceRecord, WebOptions
from infra.runtime.ingest_tree import Skipped
from infra.sources.kinds import ALWAYS_READ, Listed, wanted
from infra.sources.network import HostRefused, check_url

USER_AGENT = "ragbus-sources/1 (+https://github.com/ragbus)"
TIMEOUT_S = 20.0
"""Connecting, and each read of a response (httpx's timeouts)."""
REQUEST_DEADLINE_S = 120.0
"""A whole body: a site that drips one slower is refused."""
MAX_REDIRECTS = 5
MAX_SITEMAP_BYTES = 50 * 1024 * 1024
"""What the sitemaps protocol allows one sitemap file (uncompressed)."""
MAX_SITEMAPS = 100
HEAD_THREADS = 8
CACHE_BYTES = 64 * 1024 * 1024
"""Bodies a crawl read while listing, kept for the sync's reads of the same pages."""
GONE = frozenset({404, 410})
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
SUFFIX_OF_TYPE = {
    "text/html": ".html",
    "application/xhtml+xml": ".html",
    "application/pdf": ".pdf",
    "text/plain": ".txt",
    "text/markdown": ".md",
}


class PageGone(OSError):
    """A page that answered 404 or 410."""


class WebReader:
    def __init__(
        self, record: SourceRecord, allowed_private: Sequence[str] = (), max_file_bytes: int = 0
    ) -> None:
        self.location = record.location
        parts = urlsplit(record.location)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.host = (parts.hostname or "").lower()
        self.options = record.web or WebOptions()
        self.include, self.exclude = tuple(record.include), tuple(record.exclude)
        self.allowed = tuple(allowed_private)
        self.max_bytes = max_file_bytes or MAX_SITEMAP_BYTES
        self.client = httpx.Client(
            follow_redirects=False, timeout=TIMEOUT_S, headers={"User-Agent": USER_AGENT}
        )
        self.robots: RobotFileParser | None = None
        self.types: dict[str, str] = {}
        self._bodies: dict[str, bytes] = {}
        self._cached = 0
        self._lock = threading.Lock()

    # -- requests --

    def _request(self, method: str, url: str, limit: int = 0) -> tuple[str, httpx.Response, bytes]:
        """The response at the end of `url`'s redirects within the host, its URL, and its
        body (at most `limit` bytes, read within `REQUEST_DEADLINE_S`: a site that sends more,
        or drips it slower, is refused)."""
        for _ in range(MAX_REDIRECTS + 1):
            check_url(url, self.allowed)
            with self.client.stream(method, url) as response:
                if response.is_redirect and response.headers.get("location"):
                    target = urldefrag(urljoin(url, response.headers["location"]))[0]
                    if not self._ours(target):
                        raise OSError(f"{url} redirects out of the site, to {target}")
                    url = target
                    continue
                return url, response, self._body(url, response, limit)
        raise OSError(f"{url}: more than {MAX_REDIRECTS} redirects")

    @staticmethod
    def _body(url: str, response: httpx.Response, limit: int) -> bytes:
        if limit <= 0:
            return b""
        declared = int(response.headers.get("content-length") or 0)
        if declared > limit:
            raise OSError(f"{url}: {declared:,} bytes, over {limit:,}")
        deadline = time.monotonic() + REQUEST_DEADLINE_S
        parts: list[bytes] = []
        size = 0
        for part in response.iter_bytes():
            size += len(part)
            if size > limit:
                raise OSError(f"{url}: over {limit:,} bytes")
            if time.monotonic() > deadline:
                raise OSError(f"{url}: not read within {REQUEST_DEADLINE_S:g} s")
            parts.append(part)
        return b"".join(parts)

    def _ours(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and (parts.hostname or "").lower() == self.host

    def path_of(self, url: str) -> str:
        """A page's path in the source: its URL's path and query, `index.html` for `/`."""
        parts = urlsplit(url)
        path = parts.path.lstrip("/") or "index.html"
        if path.endswith("/"):
            path += "index.html"
        return f"{path}?{parts.query}" if parts.query else path

    def url_of(self, path: str) -> str:
        if path == "index.html":
            return self.origin + "/"
        if path.endswith("/index.html"):
            return f"{self.origin}/{path.removesuffix('index.html')}"
        return f"{self.origin}/{path}"

    def _allowed(self, url: str) -> bool:
        return self.robots is None or self.robots.can_fetch(USER_AGENT, url)

    def _load_robots(self) -> list[str]:
        """robots.txt read (a missing one allows all; one refused, 401 or 403, allows none, as
        the convention says); the sitemaps it names."""
        robots = RobotFileParser(self.origin + "/robots.txt")
        try:
            _, response, body = self._request("GET", self.origin + "/robots.txt", 1024 * 1024)
        except (httpx.HTTPError, OSError):
            robots.parse([])
            self.robots = robots
            return []
        if response.status_code in (401, 403):
            robots.parse(["User-agent: *", "Disallow: /"])
        elif response.status_code >= 400:
            robots.parse([])
        else:
            robots.parse(body.decode("utf-8", errors="replace").splitlines())
        self.robots = robots
        return list(robots.site_maps() or [])

    # -- sitemaps --

    def _sitemap_urls(self) -> list[tuple[str, str]] | None:
        """(page URL, lastmod) of every page the site's sitemaps list; None without one."""
        named = self._load_robots()
        if self.location.lower().split("?")[0].endswith(".xml"):
            queue = [self.location]
        elif named:
            queue = [url for url in named if self._ours(url)]
        else:
            queue = [self.origin + "/sitemap.xml"]
        pages: list[tuple[str, str]] = []
        found_any = False
        read = 0
        while queue and read < MAX_SITEMAPS and len(pages) < self.options.max_pages:
            url = queue.pop(0)
            read += 1
            try:
                _, response, body = self._request("GET", url, MAX_SITEMAP_BYTES)
            except (httpx.HTTPError, OSError):
                continue
            if response.status_code != 200:
                continue
            try:
                root = etree.fromstring(body, _PARSER)
            except etree.XMLSyntaxError:
                continue
            found_any = True
            kind = etree.QName(root).localname
            for entry in root:
                if not isinstance(entry.tag, str):
                    continue
                fields = {
                    etree.QName(child).localname: (child.text or "").strip()
                    for child in entry
                    if isinstance(child.tag, str)
                }
                loc = fields.get("loc", "")
                if not loc or not self._ours(loc):
                    continue
                if kind == "sitemapindex":
                    queue.append(loc)
                else:
                    pages.append((urldefrag(loc)[0], fields.get("lastmod", "")))
        return pages if found_any else None

    # -- the listing --

    def listing(self, skipped: list[Skipped]) -> Iterator[Listed]:
        pages = self._sitemap_urls()
        if pages is None:
            if not self.options.crawl:
                raise OSError(f"{self.location}: no sitemap found, and crawling is off")
            yield from self._crawl(skipped)
            return
        emitted: set[str] = set()
        unknown: list[str] = []
        for url, lastmod in pages[: self.options.max_pages]:
            path = self.path_of(url)
            if path in emitted or not self._allowed(url):
                continue
            if not wanted(path, self.include, self.exclude):
                continue
            if lastmod:
                emitted.add(path)
                yield Listed(path, f"lastmod:{lastmod}", 0)
            else:
                unknown.append(url)
        with ThreadPoolExecutor(HEAD_THREADS) as pool:
            for found in pool.map(lambda url: self._head(url, skipped), unknown):
                if found is not None and found.path not in emitted:
                    emitted.add(found.path)
                    yield found

    def _head(self, url: str, skipped: list[Skipped]) -> Listed | None:
        path = self.path_of(url)
        try:
            final, response, _ = self._request("HEAD", url)
        except (httpx.HTTPError, OSError) as exc:
            skipped.append(Skipped(path, f"cannot be reached ({exc})"))
            return None
        if response.status_code in GONE:
            return None
        if response.status_code >= 400:
            skipped.append(Skipped(path, f"answered {response.status_code}"))
            return None
        path = self.path_of(final)
        self._note_type(path, response)
        return Listed(path, _version(response), int(response.headers.get("content-length") or 0))

    def _crawl(self, skipped: list[Skipped]) -> Iterator[Listed]:
        start = urldefrag(self.location)[0]
        queue: deque[str] = deque([start])
        queued = {start}
        listed: set[str] = set()
        while queue and len(listed) < self.options.max_pages:
            url = queue.popleft()
            if not self._allowed(url):
                continue
            path = self.path_of(url)
            try:
                final, response, body = self._request("GET", url, self.max_bytes)
            except (httpx.HTTPError, OSError) as exc:
                skipped.append(Skipped(path, f"cannot be reached ({exc})"))
                continue
            if response.status_code in GONE:
                continue
            if response.status_code >= 400:
                skipped.append(Skipped(path, f"answered {response.status_code}"))
                continue
            path = self.path_of(final)
            if path in listed:
                continue
            listed.add(path)
            self._note_type(path, response)
            if "html" in self.types.get(path, ""):
                for link in _links(final, body):
                    if self._ours(link) and link not in queued:
                        queued.add(link)
                        queue.append(link)
            if not wanted(path, self.include, self.exclude):
                continue
            with self._lock:
                if self._cached + len(body) <= CACHE_BYTES:
                    self._bodies[path] = body
                    self._cached += len(body)
            yield Listed(path, _version(response, body), len(body))

    # -- reading --

    def read(self, path: str) -> bytes:
        with self._lock:
            cached = self._bodies.pop(path, None)
        if cached is not None:
            return cached
        try:
            _, response, body = self._request("GET", self.url_of(path), self.max_bytes)
        except HostRefused as exc:
            raise OSError(str(exc)) from exc
        except httpx.HTTPError as exc:
            raise OSError(f"{path}: {exc}") from exc
        if response.status_code in GONE:
            raise PageGone(f"{path} answered {response.status_code}")
        if response.status_code >= 400:
            raise OSError(f"{path} answered {response.status_code}")
        self._note_type(path, response)
        return body

    def _note_type(self, path: str, response: httpx.Response) -> None:
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind:
            with self._lock:
                self.types[path] = kind

    def media_type(self, path: str) -> str:
        return self.types.get(path) or mimetypes.guess_type(path.split("?")[0])[0] or ""

    def filename(self, path: str) -> str:
        """The page's file name, with the suffix its type reads as (`about` -> `about.html`)."""
        name = path.split("?")[0].rsplit("/", 1)[-1] or "index.html"
        suffix = SUFFIX_OF_TYPE.get(self.media_type(path), "")
        if suffix and not name.lower().endswith(suffix):
            name += suffix
        return name

    def close(self) -> None:
        self.client.close()


def _version(response: httpx.Response, body: bytes | None = None) -> str:
    etag = response.headers.get("etag")
    if etag:
        return f"etag:{etag}"
    modified = response.headers.get("last-modified")
    if modified:
        return f"modified:{modified}"
    if body is not None:
        return "sha256:" + hashlib.sha256(body).hexdigest()
    return ALWAYS_READ  # read each sync; sent only when its bytes changed


def _links(base: str, body: bytes) -> list[str]:
    try:
        document = lxml_html.fromstring(body)
    except (etree.ParserError, ValueError):
        return []
    found = []
    for href in document.xpath("//a/@href"):
        url = urldefrag(urljoin(base, str(href).strip()))[0]
        if url.startswith(("http://", "https://")):
            found.append(url)
    return found
