# ragbus — the two commands are `make demo` (set up, start services, ingest the sample,
# ask a question with streamed phases) and `make test` (set up, run the whole suite).

VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup services demo up test unit integration lint typecheck bench clean

setup: services $(VENV)/.installed

# nats-server and redis-server from Debian, when they are not installed yet.
services:
	@need=""; \
	{ command -v nats-server || [ -x /usr/sbin/nats-server ]; } >/dev/null || need="$$need nats-server"; \
	{ command -v redis-server || [ -x /usr/bin/redis-server ]; } >/dev/null || need="$$need redis-server"; \
	if [ -n "$$need" ]; then \
	  echo "installing$$need (Debian packages)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$need; \
	fi

# torch first and pinned: the CPU build; anything else pulls gigabytes of CUDA.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

demo: setup
	$(BIN)/ragbus demo

up: setup
	$(BIN)/ragbus up

test: setup
	$(BIN)/pytest -q

unit: setup
	$(BIN)/pytest -q tests/unit

integration: setup
	$(BIN)/pytest -q tests/integration

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: setup
	$(BIN)/ragbus bench --queries bench/queries.txt --concurrency 4 --duration 30 --out results/bench.json

clean:
	rm -rf $(VENV) .ragbus .pytest_cache .mypy_cache .ruff_cache
