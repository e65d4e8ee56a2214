"""Each file is parsed once, however long the files ahead of it take: the parse worker takes
no more files than its pool parses at a time, so none waits unheartbeated past the ack wait
and is delivered again (issue 46: 204 parses of 200 scanned PDFs, fetched four at a time)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from contracts import subjects as sj
from infra.documents import ParserPool
from launcher.runtime import Runtime
from tests.integration.conftest import own_services, running
from tests.integration.test_files_ingest import _publish_files, pdf_bytes

pytestmark = pytest.mark.integration

ACK_WAIT_S = 1.5
PARSE_S = 0.6
FILES = 8


async def _slow_parse(self: ParserPool, data: bytes, filename: str) -> Any:
    """The pool's parse after `PARSE_S` in the parser process: eight files take 4.8 s, three
    ack waits, so a file fetched behind the others would be delivered again."""
    await self.run(time.sleep, PARSE_S, what=filename)
    return await ORIGINAL_PARSE(self, data, filename)


ORIGINAL_PARSE = ParserPool.parse


@pytest.fixture
async def parse_worker(tmp_path: Path) -> AsyncIterator[Runtime]:
    with own_services(tmp_path, ack_wait_s=ACK_WAIT_S, worker_concurrency=4) as settings:
        async with running(settings, orchestrator=False, workers=("parse",)) as runtime:
            yield runtime


async def _parsed(runtime: Runtime, job_id: str) -> Counter[str]:
    """How many times each file was parsed, from the job's `parsed` progress events."""
    nc = await nats.connect(runtime.settings.nats_url)
    try:
        js = nc.jetstream()
        subject = sj.ingest_events_subject(job_id)
        info = await js.stream_info(sj.STREAM_INGEST_EVENTS, subjects_filter=subject)
        held = (info.state.subjects or {}).get(subject, 0)
        sub = await js.subscribe(subject, ordered_consumer=True)
        seen: Counter[str] = Counter()
        for _ in range(held):
            data = json.loads((await sub.next_msg(timeout=10)).data).get("data") or {}
            if data.get("stage") == "parsed":
                seen[data["document_id"]] += 1
        await sub.unsubscribe()
        return seen
    finally:
        await nc.close()


async def test_a_file_waiting_behind_slow_ones_is_parsed_once(
    parse_worker: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ParserPool, "parse", _slow_parse)
    names = [f"page-{i}.pdf" for i in range(FILES)]
    job_id = await _publish_files(
        parse_worker,
        *((name, pdf_bytes(f"Page {i} of the ledger.")) for i, name in enumerate(names)),
    )
    deadline = time.monotonic() + 60
    while len(seen := await _parsed(parse_worker, job_id)) < FILES:
        assert time.monotonic() < deadline, f"parsed so far: {seen}"
        await asyncio.sleep(0.5)
    await asyncio.sleep(2 * ACK_WAIT_S)  # time for any redelivery to be parsed as well
    assert await _parsed(parse_worker, job_id) == Counter(dict.fromkeys(names, 1))
