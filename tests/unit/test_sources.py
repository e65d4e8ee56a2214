"""Sources, the pure parts: what a sync owes (`infra.sources.plan`), where a folder source may
be, which hosts a web or S3 source may reach, how a source is declared and shown, and how a
web page's address makes its path."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from contracts.sources import SourceRecord, SourceSpec
from infra.sources.kinds import (
    ALWAYS_READ,
    FolderReader,
    Listed,
    SourceRefused,
    allowed_folder,
    wanted,
)
from infra.sources.network import HostRefused, check_url
from infra.sources.plan import document_id, event_id, marked, plan
from infra.sources.state import Seen
from infra.sources.web import WebReader


def _record(**fields: object) -> SourceRecord:
    values: dict[str, object] = {
        "name": "handbook",
        "location": "/srv/handbook",
        "tenant": "default",
        "store_namespace": "docs",
    }
    values.update(fields)
    return SourceRecord.model_validate(values)


def _seen(path: str, version: str = "v1", sha: str = "a" * 64, doc: str = "") -> Seen:
    return Seen(path=path, version=version, size=1, sha256=sha, document_id=doc or f"h:{path}")


def test_a_plan_puts_what_is_new_or_changed_and_deletes_what_is_gone() -> None:
    seen = {
        "same.md": _seen("same.md"),
        "edited.md": _seen("edited.md"),
        "gone.md": _seen("gone.md"),
    }
    listing = [
        Listed("same.md", "v1", 1),
        Listed("edited.md", "v2", 1),
        Listed("new.md", "v1", 1),
    ]
    decided = plan(listing, seen)
    assert [item.path for item in decided.puts] == ["edited.md", "new.md"]
    assert [item.path for item in decided.deletes] == ["gone.md"]
    assert decided.listed == 3 and decided.operations == 3


def test_a_path_passed_over_keeps_its_document() -> None:
    seen = {"locked.md": _seen("locked.md")}
    assert plan([], seen, kept=["locked.md"]).deletes == []
    assert [s.path for s in plan([], seen).deletes] == ["locked.md"]


def test_a_path_never_indexed_is_read_again_and_a_page_without_validators_each_time() -> None:
    seen = {"half.md": Seen(path="half.md", version="v1"), "page": _seen("page", ALWAYS_READ)}
    decided = plan([Listed("half.md", "v1", 1), Listed("page", ALWAYS_READ, 0)], seen)
    assert [item.path for item in decided.puts] == ["half.md", "page"]
    assert plan([], {"half.md": Seen(path="half.md")}).deletes == []  # nothing was indexed


def test_marks_carry_event_ids_fixed_by_the_job_and_the_path() -> None:
    seen = {"gone.md": _seen("gone.md")}
    decided = plan([Listed("new.md", "v", 1)], seen)
    first = marked(decided, seen, "job-1")
    again = marked(decided, seen, "job-1")
    assert [m.pending for m in first] == [m.pending for m in again]
    assert {m.pending.op for m in first if m.pending} == {"put", "delete"}
    assert event_id("job-1", "put", "new.md") != event_id("job-2", "put", "new.md")
    assert event_id("job-1", "put", "a.md") != event_id("job-1", "delete", "a.md")


def test_document_ids_are_the_sources_own_and_never_collide() -> None:
    record = _record()
    assert (
        document_id(record, "rules/mooring rules.md", set()) == "handbook:rules__mooring_rules.md"
    )
    taken = {"handbook:a.md", "handbook:a.md~2"}
    assert document_id(record, "a.md", taken) == "handbook:a.md~3"
    assert document_id(record, "x" * 300, set()) is None


def test_patterns_include_then_exclude() -> None:
    assert wanted("a/b.md", (), ())
    assert wanted("a/b.md", ("*.md",), ())
    assert not wanted("a/b.pdf", ("*.md",), ())
    assert not wanted("drafts/b.md", (), ("drafts/*",))
    assert not wanted("drafts/b.md", ("*.md",), ("drafts/*",))


def test_folders_must_lie_under_a_root_and_a_tenants_under_its_own(tmp_path: Path) -> None:
    root = tmp_path / "roots"
    (root / "acme" / "docs").mkdir(parents=True)
    (root / "globex").mkdir()
    assert allowed_folder(str(root / "docs"), "default", [root]) == (root / "docs").resolve()
    assert allowed_folder(str(root / "acme" / "docs"), "acme", [root])
    for location, tenant in (
        (str(root / "globex"), "acme"),
        (str(root / "acme" / ".." / "globex"), "acme"),
        (str(root), "acme"),
        ("/etc", "default"),
        ("relative/path", "default"),
    ):
        with pytest.raises(SourceRefused):
            allowed_folder(location, tenant, [root])
    link = root / "acme" / "out"
    link.symlink_to(root / "globex")
    with pytest.raises(SourceRefused):
        allowed_folder(str(link), "acme", [root])
    with pytest.raises(SourceRefused, match="RAGBUS_SOURCE_ROOTS"):
        allowed_folder(str(root), "default", [])


def test_a_folder_is_listed_without_links_and_read_only_inside(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.md").write_text("# A\n\ntext")
    (tmp_path / "b.txt").write_text("b")
    (tmp_path / "c.bin").write_bytes(b"\x00")
    (tmp_path / "link.md").symlink_to(tmp_path / "b.txt")
    reader = FolderReader(tmp_path)
    skipped: list = []
    listed = {item.path: item for item in reader.listing(skipped)}
    assert sorted(listed) == ["b.txt", "sub/a.md"]
    assert [s.name for s in skipped] == ["link.md"]
    assert reader.read("sub/a.md").startswith(b"# A")
    for outside in ("../etc/passwd", "/etc/passwd"):
        with pytest.raises(OSError, match="not a path inside the source"):
            reader.read(outside)
    before = listed["b.txt"].version
    (tmp_path / "b.txt").write_text("bb")
    assert next(i for i in reader.listing([]) if i.path == "b.txt").version != before


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://localhost:6379/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.5/",
        "http://[::1]/",
        "ftp://example.com/",
        "file:///etc/passwd",
    ],
)
def test_private_hosts_and_other_schemes_are_refused(url: str) -> None:
    with pytest.raises(HostRefused):
        check_url(url)


def test_a_private_host_the_operator_names_is_reached() -> None:
    check_url("http://127.0.0.1:9000/bucket", ["127.0.0.1"])
    check_url("http://127.0.0.1:9000/bucket", ["127.0.0.1:9000"])
    with pytest.raises(HostRefused):
        check_url("http://127.0.0.1:9001/", ["127.0.0.1:9000"])


def test_a_spec_fits_its_kind() -> None:
    with pytest.raises(ValidationError, match="only a folder can be watched"):
        SourceSpec(name="w", kind="web", location="https://example.com/", watch=True)
    with pytest.raises(ValidationError, match="http"):
        SourceSpec(name="w", kind="web", location="/srv/x")
    with pytest.raises(ValidationError, match="s3://"):
        SourceSpec(name="b", kind="s3", location="https://example.com/")
    with pytest.raises(ValidationError, match="reserved"):
        SourceSpec(name="f", location="/srv/x", metadata={"_source": "other"})
    with pytest.raises(ValidationError):
        SourceSpec(name="Not_A_Name", location="/srv/x")
    with pytest.raises(ValidationError):
        SourceSpec(name="f", location="/srv/x", every_s=0.1)


def test_an_s3_secret_is_kept_and_never_shown() -> None:
    record = _record(
        kind="s3",
        location="s3://bucket/prefix",
        s3={"access_key_id": "AKIA", "secret_access_key": "very-secret"},
    )
    assert "very-secret" not in record.model_dump_json()
    kept = SourceRecord.model_validate_json(record.stored_json())
    assert kept.s3 is not None and kept.s3.secret_access_key is not None
    assert kept.s3.secret_access_key.get_secret_value() == "very-secret"


def test_a_source_stamps_its_name_on_its_documents() -> None:
    record = _record(metadata={"team": "port"})
    assert record.stamped() == {"team": "port", "_source": "handbook"}


def test_a_web_pages_path_and_address_are_one_another() -> None:
    reader = WebReader(_record(kind="web", location="https://docs.example.com/guide/"))
    try:
        for url, path in (
            ("https://docs.example.com/", "index.html"),
            ("https://docs.example.com/guide/", "guide/index.html"),
            ("https://docs.example.com/guide/intro", "guide/intro"),
            ("https://docs.example.com/a?b=1", "a?b=1"),
        ):
            assert reader.path_of(url) == path
            assert reader.path_of(reader.url_of(path)) == path
        reader.types["guide/intro"] = "text/html"
        assert reader.filename("guide/intro") == "intro.html"
        assert reader.filename("guide/index.html") == "index.html"
    finally:
        reader.close()


def test_a_path_that_failed_waits_until_it_changes_and_is_forgotten_when_gone() -> None:
    empty = Seen(path="empty.md", version="v1", failed="no text")
    grown = _seen("grown.pdf", "v2").model_copy(update={"failed": "too large"})
    seen = {"empty.md": empty, "grown.pdf": grown}
    same = plan([Listed("empty.md", "v1", 0), Listed("grown.pdf", "v2", 9)], seen)
    assert same.puts == [] and same.deletes == [] and same.forgotten == []
    changed = plan([Listed("empty.md", "v2", 5), Listed("grown.pdf", "v3", 1)], seen)
    assert [item.path for item in changed.puts] == ["empty.md", "grown.pdf"]
    gone = plan([], seen)
    assert gone.forgotten == ["empty.md"]  # it made no document: nothing to delete
    assert [s.path for s in gone.deletes] == ["grown.pdf"]  # its earlier version is indexed
