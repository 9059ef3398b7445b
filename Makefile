# Two commands do all the set-up on a fresh machine with Python 3.10+:
#   make workbook   run the whole workbook on the stand-in server; prints where the results are
#   make test       lint and run the test suite (what CI runs)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: setup test workbook lint clean-notebooks sglang-envs

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

test: setup lint
	$(BIN)/python -m pytest $(ARGS)

clean-notebooks: setup
	$(BIN)/python scripts/strip_notebooks.py

# One CPU environment per supported SGLang release under .engines/ (for tests/contract/)
sglang-envs:
	$(PYTHON) scripts/sglang_envs.py
