"""One package per worker kind. Workers share only `contracts` and `infra`, never each other."""
