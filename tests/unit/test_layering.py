"""The layering, as `make lint` enforces it: import-linter's contracts in `pyproject.toml`
([tool.importlinter]) and the import circle check (`tools/import_circles.py`).

From the bottom: `contracts` (wire schemas) < `infra` < `engines` (the compute that answers a
question, knowing nothing of the bus) < `workers` (each kind the adapter from its subject to
the engines it composes), beside `orchestrator` (neither imports the other; the saga runs no
engine) < `api` (the HTTP surface, which runs no engine either) < `launcher` (runs the roles)
< `bench` (benchmarks and evaluation: it drives a stack through `client`, and may start one
with `launcher`) < `cli`, the top. Beside them, `studies` (the studies behind past decisions,
run by hand) may import any of them, and none imports it. `client` stands on `contracts`
alone. No worker kind imports another; the engines need none of each other but search's own
fusion; no engine imports the bus; inside `orchestrator`, the phases import neither one another
nor the saga above them; inside `cli`, the command modules never import one another.

Here the suite runs the same contracts (so a broken one fails the tests too), and checks
what a static graph cannot: that the CLI registers every command module, and that importing
every engine loads no bus code at run time.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CLI_SUPPORT = {"cli.common", "cli.answers", "cli.ingest_job", "cli.demo_run", "cli.mcp_bridge"}
"""`cli` modules that register no command: any command module may import them."""
CLI_TOP = {"cli.app", "cli.entry", "cli.__main__", "cli"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def test_the_import_contracts_are_kept() -> None:
    done = subprocess.run(
        [str(BIN / "lint-imports"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    assert "0 broken" in done.stdout


def test_every_command_module_is_in_the_independence_contract() -> None:
    """A new command module is held to the contract as soon as it exists."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}
    commands = {
        module_name(path)
        for path in (ROOT / "cli").glob("*.py")
        if module_name(path) not in CLI_SUPPORT | CLI_TOP
    }
    assert set(contracts["commands"]["modules"]) == commands
    kinds = {
        f"workers.{p.name}" for p in (ROOT / "workers").iterdir() if (p / "__init__.py").exists()
    }
    assert set(contracts["workers"]["modules"]) == kinds


def test_the_app_registers_every_command_module() -> None:
    app = ast.parse((ROOT / "cli" / "app.py").read_text(encoding="utf-8"))
    registered = {
        f"cli.{alias.name}"
        for node in ast.walk(app)
        if isinstance(node, ast.ImportFrom) and node.module == "cli"
        for alias in node.names
    }
    commands = {
        module_name(path)
        for path in (ROOT / "cli").glob("*.py")
        if module_name(path) not in CLI_SUPPORT | CLI_TOP
    }
    assert commands <= registered
    for name in commands:
        source = (ROOT / Path(*name.split("."))).with_suffix(".py").read_text(encoding="utf-8")
        assert "def register(app: typer.Typer)" in source, name


def printed_by(script: str) -> str:
    """What `script` prints, run in a fresh interpreter from the checkout."""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_importing_every_engine_loads_no_bus() -> None:
    """Checked where it runs too: every engine module imported, in a fresh interpreter, and
    neither FastStream, nats-py nor any of `infra.runtime` is loaded."""
    script = (
        "import importlib, pkgutil, sys, engines\n"
        "for m in pkgutil.walk_packages(engines.__path__, 'engines.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(sorted({n.split('.')[0] if not n.startswith('infra') else n for n in sys.modules"
        " if n.startswith(('faststream', 'nats', 'infra.runtime'))}))\n"
    )
    assert printed_by(script) == "[]"


def test_a_process_on_the_embedded_stores_loads_no_server_client() -> None:
    """Every worker kind and the launcher imported, in a fresh interpreter, with the defaults
    (embedded stores, no LLM): the Qdrant, Neo4j and OpenAI clients stay unloaded. They took
    about 2.5 s of each process's start (pandas, beneath neo4j, alone 0.6 s)."""
    script = (
        "import importlib, sys\n"
        "import launcher.runtime\n"
        "from launcher.layout import WORKER_KINDS\n"
        "for kind in WORKER_KINDS:\n"
        "    importlib.import_module(f'workers.{kind}')\n"
        "print(sorted({n.split('.')[0] for n in sys.modules}"
        " & {'qdrant_client', 'neo4j', 'openai', 'pandas'}))\n"
    )
    assert printed_by(script) == "[]"


def test_a_server_stores_errors_are_retried_where_its_client_is_loaded() -> None:
    """The ingest worker retries a store that was away; a server store's errors are in the
    list once its client library is loaded (it is whenever that store is configured)."""
    import neo4j.exceptions
    from qdrant_client.http.exceptions import ResponseHandlingException

    from workers.ingest.indexer import store_hiccups

    hiccups = store_hiccups()
    assert ResponseHandlingException in hiccups
    assert neo4j.exceptions.ServiceUnavailable in hiccups


def test_the_clients_errors_are_transient_once_their_clients_are_loaded() -> None:
    """`infra.errors.is_transient` imports neither Redis nor NATS for a CLI command's start,
    and still knows their connection errors, which only exist where they are loaded."""
    import nats.errors
    import redis.exceptions

    from infra.errors import PoisonMessage, is_transient

    assert is_transient(redis.exceptions.ConnectionError("gone"))
    assert is_transient(nats.errors.NoRespondersError())
    assert is_transient(TimeoutError())
    assert not is_transient(PoisonMessage("bad"))
    assert not is_transient(redis.exceptions.ResponseError("WRONGTYPE"))


def test_a_cli_command_starts_without_the_bus() -> None:
    """`ragbus ask`, `ragbus --help` …: the command table is built without FastStream, nats-py
    or the launcher; a command that serves or ingests loads them when it runs."""
    script = (
        "import sys\n"
        "import cli.app\n"
        "print(sorted({n for n in sys.modules if n.split('.')[0] in"
        " {'faststream', 'nats', 'redis', 'torch'} or n in"
        " {'launcher.runtime', 'launcher.serving', 'infra.tenancy.tenants'}}))\n"
    )
    assert printed_by(script) == "[]"
