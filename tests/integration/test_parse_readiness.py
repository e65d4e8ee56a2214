"""A parse worker whose readers cannot load is not ready (issue 54): it checks every reader at
start, says which library is missing, does not announce the `parse` role and takes no file;
the file waits on the bus, and a parse worker whose readers load takes it.

The broken install is the one Python 3.11's own pip made: `lxml_html_clean` missing (here, a
package of that name that cannot be imported, first on PYTHONPATH, which the readers' check
and the parser's child inherit)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import nats
import nats.js.errors
import pytest
from structlog.testing import capture_logs

from api.event_stream import ingest_events
from contracts.ingest import FileDocument
from infra.runtime.files import FileStore
from infra.runtime.ingest_producer import publish_job
from infra.runtime.readiness import ready_processes
from infra.runtime.topology import PARSE_WORKER, parse_lane_consumer
from launcher.runtime import Runtime
from tests.integration.conftest import own_services, running
from tests.integration.polling import until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGE = b"<html><head><title>Quay</title></head><body><p>The quay was built in 1880.</p></body>"
MISSING = (
    "the HTML reader cannot load: the library lxml_html_clean is not installed "
    "(pip install lxml_html_clean; `pip install -e .` in the checkout installs every reader's "
    "library)"
)


def without_lxml_html_clean(root: Path) -> str:
    """A PYTHONPATH on which `import lxml_html_clean` fails as if it were not installed."""
    shadow = root / "shadow" / "lxml_html_clean"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'lxml_html_clean'\", name='lxml_html_clean')\n"
    )
    return os.pathsep.join([str(shadow.parent), str(ROOT)])


async def _publish_page(runtime: Runtime) -> str:
    assert runtime.broker is not None and runtime.resources is not None
    store = FileStore(runtime.broker.connection.jetstream(), runtime.settings)
    ref = await store.put("default", "quay.html", PAGE, "quay.html", "text/html")
    receipt = await publish_job(runtime.resources.bus, [FileDocument(id="quay.html", file=ref)])
    return receipt.job_id


async def test_a_parse_worker_whose_readers_do_not_load_is_not_ready_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with own_services(tmp_path) as settings:
        monkeypatch.setenv("PYTHONPATH", without_lxml_html_clean(tmp_path))
        with capture_logs() as logs:
            async with running(settings, orchestrator=False, workers=("parse",)) as broken:
                assert broken.resources is not None
                redis = broken.resources.redis()
                assert broken.not_ready == {"parse": [MISSING]}
                assert await ready_processes(redis, ["parse"]) == {"parse": 0}
                job_id = await _publish_page(broken)
                nc = await nats.connect(settings.nats_url)
                try:
                    js = nc.jetstream()

                    await asyncio.sleep(2.0)  # time enough for a lane to open and take it
                    info = await js.stream_info(
                        PARSE_WORKER.stream, subjects_filter="rag.ingest.parse.>"
                    )
                    assert sum((info.state.subjects or {}).values()) == 1, "the file waits"
                    lane = parse_lane_consumer("default")
                    with pytest.raises(nats.js.errors.NotFoundError):
                        await js.consumer_info(lane.stream, lane.durable)  # no lane opened
                finally:
                    await nc.close()
        told = [entry for entry in logs if entry["event"] == "parse_not_ready"]
        assert told and told[0]["problems"] == [MISSING], logs
        assert told[0]["log_level"] == "error"

        # the install fixed: a parse worker started again is ready and takes the waiting file
        monkeypatch.delenv("PYTHONPATH")
        async with running(settings, orchestrator=False, workers=("parse",)) as fixed:
            assert fixed.resources is not None and fixed.not_ready == {}
            ready = fixed.resources.redis()
            counts = await until(
                lambda: ready_processes(ready, ["parse"]), 10, satisfied=lambda c: c["parse"] == 1
            )
            assert counts == {"parse": 1}
            assert fixed.broker is not None
            js = fixed.broker.connection.jetstream()
            async with asyncio.timeout(60):
                async for _, event in ingest_events(js, job_id):
                    data = event.get("data") or {}
                    if data.get("stage") == "parsed":
                        assert data["document_id"] == "quay.html"
                        break
