"""The process launcher: runs ragbus's roles, the HTTP API (`api`), the saga orchestrator
and worker kinds, in one process (`launcher.serving.serve`, around the bus side,
`launcher.runtime.Runtime`), and the worker kinds `ragbus up` puts in a supervised child
(`launcher.processes`); which kinds run where is `launcher.layout`'s.

It composes the server side and sits above it: it may import `contracts`, `infra`,
`workers`, `orchestrator` and `api` (the API only when it runs it), never `cli`. The
command line (`cli.serve`) drives it; `bench.instant` uses it to serve a stack with
instant engines.
"""
