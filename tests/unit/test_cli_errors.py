"""The CLI talks to a person: what it could not reach, where, and what fixes it, in one line
on stderr, exit status 1, no traceback (unless asked for), within seconds where nothing
answers. Each command runs as a subprocess pointed at free ports where nothing listens."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli.common import explain, verbose_asked
from client.http import ApiError
from infra.runtime.services import free_port
from tests.environment import child_environment

ROOT = Path(__file__).resolve().parents[2]
QUICK_S = 5.0
"""Where nothing answers, a command says so within this, beyond what starting the CLI takes
(`ragbus --help`, timed on the same machine, as loaded as it is then)."""


@pytest.fixture(scope="session")
def startup_s() -> float:
    """How long `ragbus --help` takes here: the interpreter and the CLI's imports."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "cli", "--help"], cwd=ROOT, capture_output=True)
    return time.monotonic() - started


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Every service the CLI could reach at a free port where nothing listens."""
    return {
        **child_environment(),
        "RAGBUS_NATS_URL": f"nats://127.0.0.1:{free_port()}",
        "RAGBUS_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "RAGBUS_API_URL": f"http://127.0.0.1:{free_port()}",
        "RAGBUS_DATA_DIR": str(tmp_path / "data"),
        "RAGBUS_START_SERVICES": "false",
    }


def ragbus(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, time.monotonic() - started


def one_sentence(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The failure's stderr: one `ragbus: …` line holding each expected part, no traceback."""
    assert done.returncode == 1, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("ragbus: "), done.stderr
    assert "Traceback" not in done.stderr and "Error:" not in done.stderr, done.stderr
    for part in expected:
        assert part in lines[0], (part, lines[0])
    return lines[0]


def test_ask_without_an_api(env: dict[str, str], startup_s: float) -> None:
    done, took = ragbus(env, "ask", "How long is the canal?")
    one_sentence(done, f"no API answers at {env['RAGBUS_API_URL']}", "ragbus up", "--api")
    assert took < startup_s + QUICK_S


def test_ask_with_a_wrong_api_url(env: dict[str, str], startup_s: float) -> None:
    wrong = f"http://127.0.0.1:{free_port()}"
    done, took = ragbus(env, "ask", "--api", wrong, "How long is the canal?")
    one_sentence(done, f"no API answers at {wrong}", "RAGBUS_API_URL")
    assert took < startup_s + QUICK_S


@pytest.fixture
def not_ragbus() -> Iterator[str]:
    """An HTTP server that is not ragbus: 404 for every path."""

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_error(404)

        do_GET = do_POST

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_ask_an_api_that_is_not_ragbus(
    env: dict[str, str], not_ragbus: str, startup_s: float
) -> None:
    done, took = ragbus(env, "ask", "--api", not_ragbus, "How long is the canal?")
    one_sentence(done, f"what answers at {not_ragbus} is not the ragbus API", "/v1/chat")
    assert took < startup_s + QUICK_S


def test_verbose_adds_the_traceback(env: dict[str, str]) -> None:
    done, _ = ragbus(env, "ask", "--verbose", "How long is the canal?")
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "ConnectError" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("ragbus: no API answers at")
    done, _ = ragbus({**env, "RAGBUS_VERBOSE": "1"}, "ask", "How long is the canal?")
    assert "Traceback" in done.stderr


def test_ingest_without_nats(env: dict[str, str], tmp_path: Path, startup_s: float) -> None:
    (tmp_path / "note.md").write_text("# Note\n\nThe canal opened in 1914.\n")
    done, took = ragbus(env, "ingest", str(tmp_path / "note.md"))
    one_sentence(done, f"no NATS server answers at {env['RAGBUS_NATS_URL']}", "RAGBUS_NATS_URL")
    assert took < startup_s + QUICK_S


def test_ingest_an_empty_folder(env: dict[str, str], tmp_path: Path, startup_s: float) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "report.odt").write_bytes(b"PK\x03\x04")  # a kind not read
    done, took = ragbus(env, "ingest", str(tmp_path / "empty"))
    one_sentence(done, f"no documents in {tmp_path / 'empty'}", ".md", ".txt", ".jsonl")
    assert took < startup_s + QUICK_S


def test_ingest_a_kind_it_does_not_read(
    env: dict[str, str], tmp_path: Path, startup_s: float
) -> None:
    (tmp_path / "report.odt").write_bytes(b"PK\x03\x04")
    done, took = ragbus(env, "ingest", str(tmp_path / "report.odt"))
    one_sentence(done, "cannot ingest", "report.odt", ".md", ".pdf", ".docx", ".jsonl")
    assert took < startup_s + QUICK_S


def test_ingest_a_corpus_that_is_not_json(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text('{"_id": "a", "text": "fine"}\nnot json\n')
    done, _ = ragbus(env, "ingest", str(tmp_path / "corpus.jsonl"))
    one_sentence(done, "line 2 of", "corpus.jsonl", '"_id"')


def test_tenant_list_without_redis_hides_the_password(
    env: dict[str, str], startup_s: float
) -> None:
    port = free_port()
    env = {**env, "RAGBUS_REDIS_URL": f"redis://:hunter2@127.0.0.1:{port}/0"}
    done, took = ragbus(env, "tenant", "list")
    one_sentence(done, f"no Redis answers at redis://:***@127.0.0.1:{port}/0", "RAGBUS_REDIS_URL")
    assert "hunter2" not in done.stderr + done.stdout
    assert took < startup_s + QUICK_S


@pytest.mark.parametrize(
    "command", [["bench", "--duration", "1"], ["eval"], ["bench-critic"], ["bench-research"]]
)
def test_api_commands_check_it_first(
    env: dict[str, str], tmp_path: Path, command: list[str], startup_s: float
) -> None:
    """`bench` before its load, `eval` and the answer benchmarks before ingesting anything."""
    beir = [] if command[0] == "bench" else ["--beir", str(tmp_path)]
    done, took = ragbus(env, *command, *beir)
    one_sentence(done, f"no API answers at {env['RAGBUS_API_URL']}")
    assert took < startup_s + QUICK_S


def _api_error(status: int, code: str, *, token_sent: bool) -> ApiError:
    return ApiError(status, code, "no", url="http://u:pw@h:9/v1/chat", token_sent=token_sent)


def test_explain_a_refused_token() -> None:
    missing = explain(_api_error(401, "unauthorized", token_sent=False))
    wrong = explain(_api_error(401, "unauthorized", token_sent=True))
    assert missing is not None and "asks for a token and none was sent" in missing
    assert wrong is not None and "refused the token" in wrong
    for sentence in (missing, wrong):
        assert "--token" in sentence and "RAGBUS_API_TOKEN" in sentence
        assert "the API at http://h:9 " in sentence and "pw" not in sentence


def test_explain_finds_the_cause_in_a_group() -> None:
    request = httpx.Request("GET", "http://127.0.0.1:9/v1/whoami")
    error = httpx.ConnectError("refused", request=request)
    try:
        raise RuntimeError("wrapped") from ExceptionGroup("tasks", [error])
    except RuntimeError as wrapped:
        sentence = explain(wrapped)
    assert sentence is not None and sentence.startswith("no API answers at http://127.0.0.1:9")
    assert explain(ValueError("a bug")) is None


def test_verbose_asked() -> None:
    assert verbose_asked(["ask", "-v", "q"])
    assert verbose_asked(["ingest", "--verbose", "x"])
    assert not verbose_asked(["ask", "--", "-v"])
    assert not verbose_asked(["ask", "q"]) or os.environ.get("RAGBUS_VERBOSE")
