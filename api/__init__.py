"""The HTTP surface and the web page: the FastAPI application (`app`), its routes (`routes`:
submit, status, SSE; `documents`: ingest; `jobs`: ingest jobs; `catalogue`: namespaces and
documents listed; `sessions`, `admin`, `ops`), their dependencies
(`deps`, `auth`, `idempotency`), models (`schemas`), the SSE relay the event endpoints share
(`sse`), JetStream readers behind the event streams (`event_stream`), and the page's assets
(`web`, `static/`).

It may import `contracts`, `infra`, `workers` and `orchestrator`; never `cli`, `launcher`,
`bench` or `client`. The command line lives in `cli`, the process launcher in `launcher`,
the Python client in `client`, evaluation and benchmarks in `bench`.
"""
