"""Who may read a document (`contracts.access`): its readers as metadata keeps them, the
reader a user's question carries, and the filter they make together with a question's own."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from contracts.access import (
    ACCESS_KEY,
    DocumentAccess,
    Reader,
    may_read,
    readable_by,
    scoped,
    session_space,
    with_access,
    without_access,
)
from contracts.filters import MAX_FILTER_DEPTH, All, matches, parse_filter
from contracts.ingest import DocumentIn, check_metadata

LEGAL = with_access({"team": "legal"}, DocumentAccess(groups=["legal"]))
ALICE = with_access({"team": "x"}, DocumentAccess(users=["alice"]))
OPEN = with_access({"team": "x"}, None)


def test_readers_are_kept_as_one_flat_list_and_read_back() -> None:
    access = DocumentAccess(groups=["legal", "legal", "board"], users=["zed", "amy"])
    assert access.principals() == ["group:board", "group:legal", "user:amy", "user:zed"]
    kept = with_access({"a": 1}, access)
    assert kept[ACCESS_KEY] == access.principals()
    assert DocumentAccess.of(kept) == access
    assert without_access(kept) == {"a": 1}
    assert ACCESS_KEY not in with_access({"a": 1}, DocumentAccess())  # none named: tenant-wide
    assert DocumentAccess.of(OPEN) is None


@pytest.mark.parametrize(
    ("reader", "legal", "alice", "open_"),
    [
        (Reader(user="alice", groups=("legal",)), True, True, True),
        (Reader(user="alice"), False, True, True),
        (Reader(user="bob", groups=("sales",)), False, False, True),
        (Reader(user="bob", groups=("legal",)), True, False, True),
        (None, True, True, True),  # the tenant's key
    ],
)
def test_a_reader_reads_tenant_wide_documents_and_those_naming_it(
    reader: Reader | None, legal: bool, alice: bool, open_: bool
) -> None:
    assert (may_read(reader, LEGAL), may_read(reader, ALICE), may_read(reader, OPEN)) == (
        legal,
        alice,
        open_,
    )


def test_a_name_is_never_a_group_and_a_group_never_a_name() -> None:
    """`user:legal` is not `group:legal`: a user named like a group reads nothing of it."""
    assert not may_read(Reader(user="legal"), LEGAL)
    assert not may_read(Reader(user="bob", groups=("alice",)), ALICE)


def test_the_callers_filter_is_anded_never_widened_and_keeps_its_bounds() -> None:
    bob = Reader(user="bob")
    widening = {"$or": [{ACCESS_KEY: {"$exists": True}}, {"team": "legal"}]}
    where = scoped(widening, bob)
    assert isinstance(where, All)
    assert not matches(where, LEGAL) and not matches(where, ALICE)
    # a filter at the depth limit still passes with the reader's access beside it
    deep: dict[str, object] = {"team": "x"}
    for _ in range(MAX_FILTER_DEPTH - 1):
        deep = {"$not": deep}
    parse_filter(deep)
    assert scoped(deep, bob) is not None
    assert scoped(None, None) is None
    assert scoped(None, bob) == readable_by(bob)


def test_callers_may_not_write_the_readers_key_as_metadata() -> None:
    with pytest.raises(ValueError, match="reserved"):
        check_metadata({ACCESS_KEY: ["group:legal"]})
    with pytest.raises(ValidationError, match="reserved"):
        DocumentIn(id="d", text="t", metadata={ACCESS_KEY: []})
    with pytest.raises(ValidationError):
        DocumentAccess(groups=["Not A Name"])


def test_a_new_set_of_readers_is_a_new_version_of_the_document() -> None:
    """The stores skip a document whose hash they hold: one whose readers changed must not be
    skipped, or its chunks would keep the old readers."""
    plain = DocumentIn(id="d", text="t")
    shared = DocumentIn(id="d", text="t", access=DocumentAccess(groups=["legal"]))
    assert (
        plain.content_hash() == DocumentIn(id="d", text="t", access=DocumentAccess()).content_hash()
    )
    assert plain.content_hash() != shared.content_hash()
    assert shared.stored_metadata()[ACCESS_KEY] == ["group:legal"]


def test_each_user_keeps_sessions_apart_from_the_tenants_and_each_others() -> None:
    spaces = {
        session_space("acme", None),
        session_space("acme", Reader(user="alice")),
        session_space("acme", Reader(user="bob")),
        session_space("beta", Reader(user="alice")),
    }
    assert len(spaces) == 4
    assert session_space("acme", None) == "acme"


def test_a_message_without_a_reader_or_readers_carries_neither() -> None:
    """So a worker of the release before users, whose models forbid unknown fields, takes
    every message that needs neither through a rolling upgrade."""
    from contracts.commands import SearchCommand
    from contracts.enums import Channel
    from contracts.queries import QuerySubmitted

    plain = QuerySubmitted(request_id="r", query="q")
    assert "reader" not in json.loads(plain.model_dump_json())
    theirs = QuerySubmitted(request_id="r", query="q", reader=Reader(user="bob"))
    assert json.loads(theirs.model_dump_json())["reader"] == {"user": "bob", "groups": []}
    assert QuerySubmitted.model_validate_json(theirs.model_dump_json()).reader == theirs.reader
    search = SearchCommand(
        request_id="r", channel=Channel.VECTOR, query="q", namespaces=["d"], top_k=1
    )
    assert "reader" not in json.loads(search.model_dump_json())
    assert "access" not in json.loads(DocumentIn(id="d", text="t").model_dump_json())
