"""The `ragbus` command line: one Typer application (`cli.app`) and its subcommand modules.

Layout (every module is a room of its own):

- `cli.app`: the application; it imports every command module and calls its `register`,
  in the order `ragbus --help` lists the commands. Nothing imports `cli.app` but the entry.
- command modules, each registering its commands on the app it is given and importing no
  other command module: `serve` (up, api, orchestrator, worker, ping), `ingest`, `ask`,
  `evaluate` (eval, bench-conversations, bench-research, bench-critic), `intent`
  (train-intent, eval-intent), `vectors` (migrate-vectors), `demo`, `specs` (openapi,
  asyncapi), `bench` (bench, bench-bus, bench-scale, bench-ingest), `chaos`, `tenants`
  (the `tenant` sub-app).
- support modules, importing no command module: `common` (consoles, shared options,
  logging, reports), `answers` (a question's answer stream on the terminal), `ingest_job`
  (publish an ingest job on the bus and follow it).
- `entry` (`ragbus`, `python -m cli`): picks how metrics are kept, then runs the app.

The command line sits on top: it may import every other package of ours (`api` for the
OpenAPI document and the event readers, `launcher` to run roles, `bench` to measure,
`client` to talk to a running API); nothing else imports `cli`.
"""
