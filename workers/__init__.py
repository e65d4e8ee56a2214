"""One package per worker kind, each the adapter from its subject to the engines it composes:
it validates the command, calls the engines (`engines`), reports its phases and publishes the
result. Workers share only `contracts`, `infra` and `engines`, never each other."""
