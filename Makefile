# tramita — the two set-up commands of the README are `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# llama-cpp-python compiles from source on Python 3.11; a portable build runs on any x86-64 CPU.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF
# The NovaOps sample is a snapshot as of 2026-05-15: the demo and chat use that as "today".
SAMPLE_TODAY := 2026-05-15

.PHONY: install run demo chat test lint typecheck eval bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned to the CPU build, so nothing pulls a multi-GB CUDA build
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e '.[dev,peers]'
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/tramita ingest
	TRAMITA_TODAY=$(SAMPLE_TODAY) $(BIN)/tramita demo
	TRAMITA_TODAY=$(SAMPLE_TODAY) $(BIN)/tramita chat --user E006

demo: install
	TRAMITA_TODAY=$(SAMPLE_TODAY) $(BIN)/tramita demo

chat: install
	TRAMITA_TODAY=$(SAMPLE_TODAY) $(BIN)/tramita chat --user E006

test: install
	$(BIN)/python -m pytest -q -rs

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy graph nodes tools tramita ingest

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .mypy_cache .ruff_cache
