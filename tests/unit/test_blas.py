"""A serving process runs numpy's BLAS on the calling thread: OpenBLAS's own threads spin
between calls and took a third of the worker process's CPU under load."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info

from infra.runtime.blas import limit_blas_threads
from infra.settings import Settings


def _blas_threads() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


def test_blas_is_pinned_to_the_configured_threads_and_zero_leaves_it() -> None:
    np.ones((64, 64)) @ np.ones(64)  # numpy's BLAS is loaded
    assert _blas_threads(), "numpy's BLAS is visible to threadpoolctl"
    before = _blas_threads()
    assert limit_blas_threads(0) is None
    assert _blas_threads() == before
    limiter = limit_blas_threads(Settings().blas_threads)
    try:
        assert Settings().blas_threads == 1
        assert _blas_threads() == {1}
    finally:
        assert limiter is not None
        limiter.restore_original_limits()
    assert _blas_threads() == before
