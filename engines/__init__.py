"""The engines: the compute that answers a question, knowing nothing of the bus.

One package per engine, each a few plain functions (and the small classes that hold a loaded
model) with typed arguments and results: `classify` (the intent classifier, its model, the
follow-up rewrite; and, beside it, the offline tooling that trains and evaluates the model and
its labelled data, `intent_data/`), `search` (the channels, ranking, score completion and
pseudo-relevance feedback), `fuse` (fusion, the graph bridge, follow-ups, the reranker,
hydration), `generate` (extractive and LLM generation), `critic` (the scores, the verdict, the
follow-up and research plans) and `memory` (what a turn leaves in memory, and its recall).

Engines import `contracts`, `infra` and one another, never `workers`, FastStream or NATS: a
worker (`workers.<kind>`) is the adapter from its subject to the engines it composes, and the
same-work peer (`bench.same_work`) composes the very same engines without the bus. What an
engine needs of the process (encoder, stores, models, settings) it takes as
`infra.runtime.resources.Resources`, imported for its type only.
"""
