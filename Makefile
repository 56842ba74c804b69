# One command to serve, one to test: each sets up .venv first when it is missing or stale.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONFIG ?= configs/demo.yaml
# optional extras on top of the test tools, e.g. `make serve EXTRAS=test,semantic`
EXTRAS ?= test
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: setup installed serve serve-cluster lint test bench clean

# the Node packages of the tests are installed again only when their lock files change, not with
# every change of pyproject.toml (three `npm ci`, about a minute)
NODE_LOCKS := tests/oidc/package-lock.json tests/conformance/runner/package-lock.json \
	tests/conformance/server/package-lock.json
NODE_STAMP := $(VENV)/.installed-node

# a fresh setup installs the Node packages beside the Python ones (two jobs of make at once)
setup:
	@$(MAKE) --no-print-directory --jobs=2 installed

installed: $(STAMP) $(NODE_STAMP)
	@:

# the packages are installed by uv (from PyPI, into the venv): the same ones pip picks, in about a
# quarter of its time (a fresh install took 15 s against pip's 53-60 s), fetching them and
# compiling their bytecode in parallel. uv trusts the system's certificates as pip does, but reads
# its own settings (UV_INDEX_URL, UV_CACHE_DIR...), not pip's; where uv cannot be installed or
# fails, or with `make setup INSTALLER=pip`, pip installs. UV_VERSION is the release series whose
# options this recipe uses
INSTALLER ?= uv
UV_VERSION ?= 0.13.*
UV_INSTALL = $(VENV)/bin/uv pip install -q --python $(PY) --system-certs --compile-bytecode -e '.[$(EXTRAS)]'
PIP_INSTALL = $(PY) -m pip install -q -e '.[$(EXTRAS)]'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if [ '$(INSTALLER)' != uv ]; then false; \
	elif ! $(PY) -m pip install -q 'uv==$(UV_VERSION)' >/dev/null 2>&1; then \
		echo 'make setup: uv could not be installed; pip installs the packages'; false; \
	else \
		echo "$(UV_INSTALL)"; $(UV_INSTALL) || { \
		echo 'make setup: uv could not install the packages; pip installs them'; false; }; \
	fi || { \
		$(PY) -m pip install -q --upgrade pip >/dev/null; \
		echo "$(PIP_INSTALL)"; $(PIP_INSTALL); }
	@touch $(STAMP)

$(NODE_STAMP): $(NODE_LOCKS)
	@# the OpenID provider the identity tests start (tests/oidc), when npm is here; they skip without it
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix tests/oidc --no-audit --no-fund --loglevel=error; fi
	@# the MCP conformance suite (with Node 22 from npm) and its reference server (tests/conformance)
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/conformance/runner --no-audit --no-fund --loglevel=error && \
		npm ci --prefix tests/conformance/server --no-audit --no-fund --loglevel=error; fi
	@mkdir -p $(VENV) && touch $(NODE_STAMP)

# bridge serve's options, passed only when given on make's command line (`make serve PORT=9000`,
# `make serve HOST=127.0.0.2 ARGS=-v`), not from the environment, where shells and hosting
# platforms set HOST and PORT for their own uses
given = $(if $(filter command line,$(origin $(1))),$($(1)))
SERVE_OPTIONS = $(if $(call given,HOST), --host $(call given,HOST))$(if $(call given,PORT), --port $(call given,PORT))$(if $(call given,ARGS), $(call given,ARGS))

serve: $(STAMP)
	$(VENV)/bin/bridge serve -c $(CONFIG)$(SERVE_OPTIONS)

# Redis from its wheel and three replicas of `bridge serve` on free loopback ports, sharing it
# (configs/cluster.yaml, docs/deploy.md); Ctrl-C stops them all
REPLICAS ?= 3
CLUSTER_CONFIG ?= configs/cluster.yaml

serve-cluster: $(STAMP)
	$(PY) -m bridge.demo.cluster --config $(CLUSTER_CONFIG) --replicas $(REPLICAS)

# lint and format check (ruff) and types (mypy, over bridge/ and adapters/); `make test` runs it
# beside the tests; `$(VENV)/bin/ruff format .` formats the tree
LINT = $(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy

lint: $(STAMP)
	$(LINT)

# the suite runs on TEST_WORKERS processes of pytest-xdist (`make test TEST_WORKERS=0`: in one), a
# test file on one of them, so that the servers a module's tests share start once; the files go
# in the order tests/conftest.py gives them (the slowest first). pytest keeps the
# test modules it rewrites for their asserts as bytecode, which PYTHONDONTWRITEBYTECODE (set on
# some machines) forbids: each worker then rewrote them all again, 12 s of CPU. Three workers on
# two cores: a worker spends much of its time waiting on the servers and commands its tests start,
# and two left the cores about a third idle (runs of 256 and 277 s took 220 s on three)
TEST_WORKERS ?= 3

# the console's browser tests need a headless Chromium (tests/browser.py): without one they are
# skipped, and said so here; under CI=true they fail instead
BROWSER_HINT = the console's browser tests are skipped: no chromium and chromedriver found (apt-get install -y chromium chromium-driver)

PYTEST = PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15

# the lint runs beside the tests, in the time they wait on the servers they start, at the lowest
# priority (nice 19): in a fresh clone mypy has no cache and takes about 30 s of CPU, which the
# tests' processes, keeping both cores about 93 % busy, would otherwise share with it; what it says
# is printed after the tests' summary, and either failing fails `make test`
test: setup
	@if ! { command -v chromium || command -v chromium-browser; } >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then echo "make test: $(BROWSER_HINT)"; fi
	@echo '$(PYTEST)'
	@nice -n 19 sh -c '$(LINT)' > $(VENV)/lint.log 2>&1 & lint=$$!; \
	$(PYTEST); tests=$$?; \
	wait $$lint; linted=$$?; \
	echo '$(LINT)'; cat $(VENV)/lint.log; \
	if [ $$linted != 0 ]; then echo "make test: make lint failed"; fi; \
	[ $$tests = 0 ] && [ $$linted = 0 ]

bench: $(STAMP)
	@status=0; for b in bench/[!_]*.py; do echo "== $$b"; $(PY) $$b || status=1; done; exit $$status

clean:
	rm -rf $(VENV) .bridge-data build *.egg-info
