"""The cyclic garbage collector, tuned for a long-running service.

A started ragbus process holds a few hundred thousand long-lived objects (the framework, the
models, the sample corpus of the instant engines). CPython's oldest generation walks all of them
on every full collection: 100-150 ms each, measured under `ragbus bench-bus`, which stalls
every request in flight. Per request the hot path allocates many short-lived containers (the
decoded messages, pydantic models), which with the default threshold of 700 run a young
collection every few messages.

`settle_heap` moves what start-up built into the permanent generation (`gc.freeze`, as
CPython's documentation recommends for servers), so later full collections only walk what the
requests made, and raises the young generation's threshold so it runs less often.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000
"""Allocations (less deallocations) of container objects between young collections."""


def settle_heap(young_threshold: int = YOUNG_THRESHOLD) -> None:
    """Collect once, freeze what survives, and space the young collections out. Safe to call
    again after later start-up steps (the API's app, a lazily loaded model)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)
