"""The scale-out benchmark's pure parts: which processes it runs, and how it sums a run."""

from __future__ import annotations

from bench.scaleout import STATELESS, scale_roles, summary


def test_only_the_stateless_roles_get_more_processes() -> None:
    roles = scale_roles(2)
    assert {name: count for name, (_, count) in roles.items()} == {
        "api": 1,
        "stores": 1,
        "orchestrator": 2,
        "classify": 2,
        "generate": 2,
        "critic": 2,
    }
    # the embedded stores belong to one process: search, fuse, tool and ingest share it
    assert roles["stores"][0] == ["worker", "search", "fuse", "tool", "ingest"]
    assert set(STATELESS) <= set(roles)


def test_a_run_sums_its_processes_cpu_by_role_largest_first() -> None:
    report = {
        "throughput_qps": 12.5,
        "latency_ms": {"p50": 300.0, "p95": 900.0, "p99": 1200.0},
        "errors": 0,
        "unfinished": 0,
        "cpu": {
            "server_cpu_ms_per_request": 120.0,
            "server_cores_busy": 1.9,
            "process_cpu_ms_per_request": {
                "critic-1": 20.0,
                "critic-2": 22.5,
                "api-1": 10.0,
                "stores-1": 30.0,
            },
        },
    }
    row = summary(report, 2)
    assert row["processes_per_stateless_role"] == 2
    assert row["cpu_ms_per_request_by_role"] == {"critic": 42.5, "stores": 30.0, "api": 10.0}
    assert list(row["cpu_ms_per_request_by_role"]) == ["critic", "stores", "api"]
    assert row["latency_ms"] == {"p50": 300.0, "p95": 900.0}
    assert (row["cpu_ms_per_request"], row["server_cores_busy"]) == (120.0, 1.9)
