"""Each package imports only the packages below it. Checked on the source (every `import`
statement, those inside functions and under `TYPE_CHECKING` included), so a lazy import
cannot hide a dependency the layering forbids.

From the bottom: `contracts` (wire schemas) < `infra` < `workers`, `orchestrator` (side by
side: neither imports the other) < `api` (the HTTP surface) < `launcher` (runs the roles);
`client` (the HTTP API's Python client) sits on `contracts` alone; `bench` (benchmarks and
evaluation) drives a stack through `client` and may start one with `launcher`, but takes
nothing from `api`; `cli` is the top and nothing imports it. Inside `cli`, the command
modules never import one another.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = (
    "contracts",
    "infra",
    "workers",
    "orchestrator",
    "api",
    "launcher",
    "client",
    "bench",
    "cli",
)
ALLOWED: dict[str, set[str]] = {
    "contracts": set(),
    "infra": {"contracts"},
    "workers": {"contracts", "infra"},
    "orchestrator": {"contracts", "infra"},  # the saga decides; it runs no worker code
    "client": {"contracts"},
    "api": {"contracts", "infra", "orchestrator"},
    "launcher": {"contracts", "infra", "workers", "orchestrator", "api"},
    "bench": {"contracts", "infra", "workers", "orchestrator", "client", "launcher"},
    "cli": set(OURS) - {"cli"},
}
CLI_SUPPORT = {"cli.common", "cli.answers", "cli.ingest_job"}
"""`cli` modules that register no command: any command module may import them."""
CLI_TOP = {"cli.app", "cli.entry", "cli.__main__", "cli"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path) -> set[str]:
    """Every module name `path` imports, absolute (a relative import resolved)."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], base]).strip(".")
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def ours(name: str) -> str | None:
    top = name.split(".", 1)[0]
    return top if top in OURS else None


@pytest.mark.parametrize("package", OURS)
def test_a_package_imports_only_the_packages_below_it(package: str) -> None:
    wrong = sorted(
        f"{module_name(path)} imports {name}"
        for path in sources(package)
        for name in imported(path)
        if (top := ours(name)) is not None and top != package and top not in ALLOWED[package]
    )
    assert wrong == []


def test_the_command_modules_never_import_each_other() -> None:
    commands = {
        module_name(path)
        for path in sources("cli")
        if module_name(path) not in CLI_SUPPORT | CLI_TOP
    }
    assert {"cli.serve", "cli.ask", "cli.bench", "cli.tenants"} <= commands
    wrong = []
    for path in sources("cli"):
        name = module_name(path)
        if name in CLI_TOP:
            continue
        inside = {".".join(n.split(".")[:2]) for n in imported(path) if n.startswith("cli.")}
        allowed = CLI_SUPPORT if name in commands else CLI_SUPPORT - {name}
        wrong += [f"{name} imports {n}" for n in sorted(inside - allowed)]
    assert wrong == []


def test_the_app_registers_every_command_module() -> None:
    app = ROOT / "cli" / "app.py"
    registered = {name for name in imported(app) if name.startswith("cli.")}
    commands = {
        module_name(path)
        for path in sources("cli")
        if module_name(path) not in CLI_SUPPORT | CLI_TOP
    }
    assert commands <= registered
    for name in commands:
        source = (ROOT / Path(*name.split("."))).with_suffix(".py").read_text(encoding="utf-8")
        assert "def register(app: typer.Typer)" in source, name
