"""The operator's MCP servers as configured: the desktop clients' `mcpServers` shape, from a JSON
or YAML file or inline, with every mistake named (server, field, what to write instead)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from infra.config.mcp import McpConfigError, McpServer
from infra.settings import Settings

STDIO = {"command": "npx", "args": ["-y", "mcp-server-everything", "stdio"]}
HTTP = {"url": "https://tools.example/mcp", "token": "t0k"}


def servers(**entries: Any) -> str:
    return json.dumps({"mcpServers": entries})


def test_a_file_in_the_desktop_clients_shape_is_read_as_json_or_yaml(tmp_path: Path) -> None:
    as_json = tmp_path / "mcp.json"
    as_json.write_text(json.dumps({"globalShortcut": "x", "mcpServers": {"everything": STDIO}}))
    as_yaml = tmp_path / "mcp.yaml"
    as_yaml.write_text(
        "mcpServers:\n  notes:\n    url: https://tools.example/mcp\n    token: t0k\n"
        "    timeout_s: 5\n"
    )
    [(name, server)] = Settings(mcp_config=as_json).mcp_server_configs().items()
    assert (name, server.command, server.args, server.trusted) == (
        "everything",
        "npx",
        ["-y", "mcp-server-everything", "stdio"],
        False,  # sandboxed unless said otherwise
    )
    notes = Settings(mcp_config=as_yaml).mcp_server_configs()["notes"]
    assert notes.http_headers() == {"Authorization": "Bearer t0k"}
    assert (notes.timeout_s, notes.stdio, notes.prefix_for("notes")) == (5, False, "notes")


def test_inline_servers_take_either_shape_and_join_the_file(tmp_path: Path) -> None:
    wrapped = Settings(mcp_servers=servers(everything=STDIO)).mcp_server_configs()
    bare = Settings(mcp_servers=json.dumps({"everything": STDIO})).mcp_server_configs()
    assert wrapped == bare
    file = tmp_path / "mcp.json"
    file.write_text(servers(web=HTTP))
    both = Settings(mcp_config=file, mcp_servers=servers(everything=STDIO))
    assert sorted(both.mcp_server_configs()) == ["everything", "web"]
    twice = Settings(mcp_config=file, mcp_servers=servers(web=HTTP))
    with pytest.raises(McpConfigError, match="'web' is named in both"):
        twice.mcp_server_configs()


def test_no_servers_by_default_and_disabled_ones_are_left_out() -> None:
    assert Settings().mcp_server_configs() == {}
    configured = Settings(mcp_servers=servers(a=STDIO, b={**HTTP, "disabled": True}))
    assert list(configured.mcp_server_configs()) == ["a"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({**STDIO, **HTTP}, "entry: give either `command`"),
        ({**STDIO, "token": "t"}, "token belongs to an HTTP server"),
        ({"args": ["x"]}, "either `command`"),
        ({"url": "https://x/mcp", "env": {"A": "1"}}, "env belongs to a stdio server"),
        ({"url": "ftp://x/mcp"}, "not an http:// or https:// URL"),
        ({**STDIO, "commands": "x"}, "commands: Extra inputs are not permitted"),
        ({**HTTP, "trusted": True}, "`trusted` is for stdio servers"),
        ({**STDIO, "type": "sse"}, "type: Input should be"),
        ({**STDIO, "prefix": "no spaces"}, "prefix 'no spaces'"),
        ({**STDIO, "timeout_s": 0}, "timeout_s: Input should be greater than 0"),
        ({**STDIO, "max_result_chars": 10**6}, "max_result_chars: Input should be less"),
        (
            {
                **STDIO,
                "routes": [
                    {
                        "pattern": "echo (?P<text>.+)",
                        "tool": "echo",
                        "arguments": {"message": "{txt}"},
                    }
                ],
            },
            "txt named in arguments but not a named group",
        ),
        ({**STDIO, "routes": [{"pattern": "(unclosed", "tool": "echo"}]}, "not a regular"),
    ],
)
def test_a_wrong_entry_is_refused_with_its_server_and_field_named(
    entry: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(mcp_servers=servers(broken=entry))
    assert "server 'broken'" in str(refused.value)
    assert message in str(refused.value)


@pytest.mark.parametrize("name", ["Upper", "-dash", "a" * 33, "with space", "under_score"])
def test_server_names_are_short_lower_case_words(name: str) -> None:
    with pytest.raises(ValidationError, match="lower-case letters, digits and '-'"):
        Settings(mcp_servers=servers(**{name: STDIO}))


def test_two_servers_with_one_prefix_are_refused() -> None:
    with pytest.raises(ValidationError, match="'a' and 'b' share the prefix 'x'"):
        Settings(mcp_servers=servers(a={**STDIO, "prefix": "x"}, b={**HTTP, "prefix": "x"}))


def test_a_file_that_is_missing_or_not_valid_says_so(tmp_path: Path) -> None:
    with pytest.raises(McpConfigError, match="cannot read"):
        Settings(mcp_config=tmp_path / "missing.json").mcp_server_configs()
    bad = tmp_path / "bad.yml"
    bad.write_text("mcpServers: [unclosed")
    with pytest.raises(McpConfigError, match="is not valid"):
        Settings(mcp_config=bad).mcp_server_configs()
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"servers": {}}))
    with pytest.raises(McpConfigError, match="no `mcpServers` object"):
        Settings(mcp_config=other).mcp_server_configs()


def test_the_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGBUS_MCP_SERVERS", servers(everything=STDIO))
    monkeypatch.setenv("RAGBUS_MCP_CALL_TIMEOUT_S", "5")
    settings = Settings()
    assert list(settings.mcp_server_configs()) == ["everything"]
    assert (settings.mcp_call_timeout_s, settings.mcp_max_result_chars) == (5, 16_000)
    assert (settings.mcp_connect_timeout_s, settings.mcp_reconnect_max_s) == (10, 30)


def test_a_server_entry_alone() -> None:
    server = McpServer.model_validate({**STDIO, "type": "stdio", "env": {"K": "v"}})
    assert server.stdio and server.http_headers() == {}
    with pytest.raises(ValidationError, match="type stdio belongs to a stdio server"):
        McpServer.model_validate({**HTTP, "type": "stdio"})
