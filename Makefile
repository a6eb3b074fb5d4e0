# tramita — the two set-up commands of the README are `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# llama-cpp-python compiles from source on Python 3.11, for this machine's CPU: a native build reads
# prompts far faster where the CPU has AVX-512 or VNNI (`tramita bench --sections llama`). The build
# is stamped with the CPU's instruction sets (tools/llama_build.py); `make install` compiles it again
# when the environment is on a CPU that lacks one of them. CMAKE_ARGS=-DGGML_NATIVE=OFF: portable.
export CMAKE_ARGS ?= -DGGML_NATIVE=ON
LLAMA_PIN := $(shell grep -o 'llama-cpp-python==[0-9.]*' pyproject.toml)
# The NovaOps sample is a snapshot as of 2026-05-15: the demo and chat use that as "today".
SAMPLE_TODAY := 2026-05-15

.PHONY: install llama-rebuild run demo chat test lint typecheck eval bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned to the CPU build, so nothing pulls a multi-GB CUDA build
	$(BIN)/pip install torch==2.13.0
	# never a wheel cached from another build or machine: compiled here, then stamped
	$(BIN)/pip install --no-cache-dir '$(LLAMA_PIN)'
	$(BIN)/python -m tools.llama_build stamp
	$(BIN)/pip install -e '.[dev,peers]'
	touch $@

install: $(BIN)/.installed
	@$(BIN)/python -m tools.llama_build check || $(MAKE) --no-print-directory llama-rebuild

# compile llama-cpp-python again for this CPU (an environment moved between machines, or CMAKE_ARGS changed)
llama-rebuild:
	$(BIN)/pip install --no-cache-dir --force-reinstall --no-deps '$(LLAMA_PIN)'
	$(BIN)/python -m tools.llama_build stamp

run: install
	$(BIN)/tramita ingest
	TRAMITA_TODAY=$(SAMPLE_TODAY) $(BIN)/tramita warm
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
