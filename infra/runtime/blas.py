"""BLAS's own threads, pinned for a service.

numpy hands every matrix product above a small size to OpenBLAS, which by default runs it on a
thread per core and leaves those threads spinning after each call, waiting for the next. A
ragbus process makes many small products (a graph walk's power iteration, the sentence
similarities of generation and the critic) from several coroutines and threads at once, so
the spinning threads only compete with the event loops and the encoder for the cores: `perf`
put 34 % of the worker process's samples in OpenBLAS's `blas_thread_server` under
`ragbus bench -c 8` on 2 cores. A process that serves runs BLAS on the calling thread instead
(`RAGBUS_BLAS_THREADS`, 1 by default; 0 leaves the library's default), as a thread-per-request
server should; its parallelism is its requests.
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits


def limit_blas_threads(threads: int) -> threadpool_limits | None:
    """Pin the BLAS libraries this process has loaded to `threads` (0: leave them be); the
    limiter, whose `restore_original_limits()` undoes it."""
    if threads <= 0:
        return None
    return threadpool_limits(limits=threads, user_api="blas")
