"""Threads per process follow cores ÷ processes (`infra.threads`), and `ragbus up` tells its
child how many processes share the machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra import threads
from infra.retrieval.encoder import encoder_threads
from infra.settings import Settings
from launcher.processes import WorkerChild


def on_cores(monkeypatch: pytest.MonkeyPatch, cores: int) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)


@pytest.mark.parametrize(
    ("cores", "processes", "share", "encoder"),
    [
        (2, 0, 2, 2),  # alone: every core
        (2, 2, 1, 1),  # `ragbus up` on 2 cores: one each
        (2, 4, 1, 1),  # more processes than cores: still one thread
        (16, 2, 8, 4),  # the encoder's cap of 4
        (16, 8, 2, 2),
        (3, 2, 1, 1),
    ],
)
def test_the_share_is_cores_over_processes(
    monkeypatch: pytest.MonkeyPatch, cores: int, processes: int, share: int, encoder: int
) -> None:
    on_cores(monkeypatch, cores)
    settings = Settings(host_processes=processes)
    assert threads.thread_share(settings) == share
    assert encoder_threads(settings) == encoder


def test_the_encoder_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    on_cores(monkeypatch, 2)
    assert encoder_threads(Settings(encoder_threads=6, host_processes=2)) == 6


def test_the_affinity_counts_not_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    on_cores(monkeypatch, 3)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert threads.available_cores() == 3


def test_without_affinity_the_machine_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert threads.available_cores() == 6
    assert threads.thread_share(Settings(host_processes=3)) == 2
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert threads.available_cores() == 1


def test_torch_is_capped_at_the_share_never_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    before = torch.get_num_threads()
    try:
        on_cores(monkeypatch, 8)
        threads.set_torch_threads(4)
        threads.cap_torch_threads(Settings(host_processes=4))  # share 2
        assert torch.get_num_threads() == 2
        threads.cap_torch_threads(Settings(host_processes=1))  # share 8: the 2 stays
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_tokenizer_pool_takes_a_size_only_when_none_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    threads.limit_tokenizer_threads(1)
    assert os.environ["RAYON_NUM_THREADS"] == "1"
    threads.limit_tokenizer_threads(3)  # the rayon pool is already sized: keep what it read
    assert os.environ["RAYON_NUM_THREADS"] == "1"


def test_the_worker_child_is_told_how_many_processes_share_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One `ragbus up` stack counts as one (its processes take turns: the queries' models are
    light, ingestion's bulk encoder runs niced in the background); what the user set for
    several stacks on one machine reaches the child."""
    monkeypatch.delenv("RAGBUS_HOST_PROCESSES", raising=False)
    env = WorkerChild(Settings(data_dir=tmp_path), ["search"], restarts=1, window_s=60.0)._env()
    assert env["RAGBUS_HOST_PROCESSES"] == "0"
    settings = Settings(data_dir=tmp_path, host_processes=2)
    env = WorkerChild(settings, ["search"], restarts=1, window_s=60.0)._env()
    assert env["RAGBUS_HOST_PROCESSES"] == "2"
    monkeypatch.setenv("RAGBUS_HOST_PROCESSES", env["RAGBUS_HOST_PROCESSES"])
    assert Settings().host_processes == 2  # what the child reads
