"""HTTP API (submit, status, SSE, ingest), the CLI and the process launcher."""
