"""The CPU ledger files py-spy's raw samples by the role on the stack and the innermost layer."""

from __future__ import annotations

import pytest

from bench.ledger import MESSAGING, OTHER_LAYER, PARTS, ledger, parse_frames, part, role

LOOP = "main (bench/instant.py:172);run (asyncio/runners.py:190)"
SAGA = (
    f"{LOOP};consume (faststream/_internal/endpoint/subscriber/usecase.py:347);"
    "Orchestrator.on_result (orchestrator/service.py:120);"
    "StateStore.apply (orchestrator/store.py:294);"
    "Pipeline.execute (redis/asyncio/client.py:2288)"
)
WORKER = (
    f"{LOOP};consume (faststream/_internal/endpoint/subscriber/usecase.py:347);"
    "handle (workers/search/__init__.py:171);"
    "validate_json (pydantic/type_adapter.py:400)"
)
API = (
    f"{LOOP};run_asgi (uvicorn/protocols/http/h11_impl.py:403);"
    "submit (api/routes.py:90);dumps (json/__init__.py:231)"
)
NATS_LOOP = f"{LOOP};Client._read_loop (nats/aio/client.py:2100);feed (nats/protocol/parser.py:80)"


def test_a_frame_keeps_its_function_and_path() -> None:
    frames = parse_frames("f (a/b.py:3);<lambda> (c (x).py:9);g (<frozen runpy>:88)")
    assert frames[0] == ("f", "a/b.py")
    assert frames[-1] == ("g", "<frozen runpy>")


def test_roles_are_the_outermost_part_of_ragbus_on_the_stack() -> None:
    assert role(parse_frames(SAGA)) == "saga"
    assert role(parse_frames(WORKER)) == "worker: search"
    assert role(parse_frames(API)) == "API (submission, SSE relay)"
    assert role(parse_frames(NATS_LOOP)) == "nats-py read and flush loops"
    assert role(parse_frames(LOOP)).startswith("runtime")
    encoding = (
        "_bootstrap (threading.py:1002);Thread.run (threading.py:982);"
        "_worker (concurrent/futures/thread.py:83);_WorkItem.run (concurrent/futures/thread.py:58);"
        "Encoder.encode (infra/retrieval/encoder.py:120);"
        "OnnxEncoder._run (infra/retrieval/onnx_encoder.py:90)"
    )
    assert role(parse_frames(encoding)).startswith("engines in their threads")


def test_the_ledger_gives_shares_and_milliseconds_a_request() -> None:
    lines = [f"{SAGA} 2", f"{WORKER} 1", f"{API} 1", "not a sample", ""]
    report = ledger(lines, cpu_ms_per_request=20.0)
    assert report["samples"] == 4
    roles = {row["name"]: row for row in report["by_role"]}
    assert roles["saga"]["share"] == 0.5
    assert roles["saga"]["ms_per_request"] == pytest.approx(10.0)
    layers = {row["name"]: row["share"] for row in report["by_layer"]}
    assert layers == {"redis-py": 0.5, "pydantic": 0.25, OTHER_LAYER: 0.25}


def test_without_the_cpu_figure_only_shares_are_given() -> None:
    report = ledger([f"{SAGA} 3"], cpu_ms_per_request=None)
    assert "ms_per_request" not in report["by_role"][0]


def test_the_ledger_says_how_much_of_each_process_was_in_the_kernel() -> None:
    from rich.console import Console

    from bench.bus_report import print_ledger

    report = {
        "ledger": {"samples": 10, "by_role": [], "by_layer": []},
        "cpu": {"process_kernel_share": {"ragbus": 0.08, "ragbus-child": 0.1, "nats-server": 0.5}},
    }
    console = Console(record=True, width=200)
    print_ledger(report, console)
    text = console.export_text()
    assert "in the kernel, by /proc: ragbus 8%, ragbus-child 10% of each process's CPU" in text
    assert "nats-server" not in text


def test_each_sample_is_set_against_what_the_floor_does() -> None:
    """The floor is nats-py, redis-py and the loop: those layers are its part wherever they
    run; everything else is something the floor leaves out, named by layer or by owner."""
    assert part(parse_frames(SAGA)) == MESSAGING  # a Redis call, even inside the saga
    assert part(parse_frames(NATS_LOOP)) == MESSAGING
    assert part(parse_frames(WORKER)) == PARTS["pydantic"]
    assert part(parse_frames(API)) == PARTS["http"]  # ragbus's API code is the HTTP end
    step = (
        f"{LOOP};handle (workers/generate/router.py:80);select (engines/generate/extractive.py:9)"
    )
    assert part(parse_frames(step)) == PARTS["steps"]
    decide = (
        f"{LOOP};Orchestrator._apply (orchestrator/service.py:180);decide (orchestrator/saga.py:3)"
    )
    assert part(parse_frames(decide)) == PARTS["saga"]
    phases = f"{LOOP};_phase_events (infra/runtime/phase_events.py:40)"
    assert part(parse_frames(phases)) == PARTS["runtime"]
    report = ledger([f"{SAGA} 3", f"{step} 1"], cpu_ms_per_request=8.0)
    parts = {row["name"]: row["ms_per_request"] for row in report["by_part"]}
    assert parts == {MESSAGING: pytest.approx(6.0), PARTS["steps"]: pytest.approx(2.0)}
