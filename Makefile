# gputopo: the README's first commands. `make demo` sets up and runs the main job on a built-in
# simulated machine; `make test` sets up and runs the tests (`make test-fast`: those that start
# no process). All work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
# The CPU wheel of torch (on a GPU machine: `make setup TORCH=torch` for the CUDA build).
TORCH  ?= torch==2.13.0
SIM    ?= seed-8gpu
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo lint test test-fast test-slurm perf clean gpu-check gpu-check-fake

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check "$(TORCH)"
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/gputopo scan --sim $(SIM)
	$(VENV)/bin/gputopo bench --sim $(SIM) --quick

# Type-check the package (config in pyproject's [tool.mypy]) and lint it with ruff (pyflakes,
# bugbear): the code that cannot run without a GPU must at least agree with the libraries it calls.
lint: setup
	$(VENV)/bin/mypy gputopo
	$(VENV)/bin/ruff check gputopo tests benchmarks tools

# What CI runs (.ci/run): fails on a type or lint error as on a failing test. The tests run in
# TEST_WORKERS processes (pytest-xdist; 2 for CI's 2 cores; TEST_WORKERS=0: in this one), each
# taking the next test when it is free (worksteal: the long ones do not queue behind each other);
# the tests that assert a wall-time bound (marked serial) then run alone, on an otherwise idle
# machine, so the bound they check is the code's, not the other worker's load.
TEST_WORKERS ?= 2
test: lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not serial"
	$(PY) -m pytest -q -m serial

# The real-Slurm tests alone (tests/slurm, marked slurm; `make test` runs them too): munged,
# slurmctld and slurmd of Debian 12 started as root on this machine, `gputopo health` as its
# HealthCheckProgram (docs/fleet.md). Without the packages they skip; under CI=true they fail.
test-slurm: setup
	$(PY) -m pytest -q -m slurm tests/slurm

# While working: every test that starts no process (no worker, no `python -m gputopo`, no fork);
# tests/conftest.py fails a test that starts one without the `slow` mark, so none hides here.
test-fast: setup
	$(PY) -m pytest -q -m "not slow"

# Every script docs/performance.md quotes (several minutes on 2 cores).
perf: setup
	$(PY) benchmarks/scan_speed.py
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/sweep_time.py
	$(PY) benchmarks/demo_time.py
	$(PY) benchmarks/pair_floor.py
	$(PY) benchmarks/cluster_scale.py
	$(PY) benchmarks/history_cost.py
	$(PY) benchmarks/reader_scale.py
	$(PY) benchmarks/health_time.py
	$(PY) benchmarks/gate_time.py

# The GPU acceptance run (docs/gpu-check.md): on a GPU machine whose python3 already has CUDA torch
# and the requirements, from the checkout, about 4 minutes; it builds no venv and installs nothing.
# Leaves reports/gpu-check-<gpu>/ and reports/gpu-check-<gpu>.tar.gz. E.g.
#   make gpu-check GPU_CHECK_ARGS="--budget 240 --copy-to /somewhere"
GPU_CHECK_ARGS ?=
gpu-check:
	PYTHONPATH=. $(PYTHON) tools/gpu_check.py $(GPU_CHECK_ARGS)

# The same run here, without a GPU: the fake nvidia-smi (tests/fake_nvidia_smi, outputs written
# from NVIDIA's documented formats) and the built-in sim it was written to agree with.
GPU_CHECK_SIM ?= h100-sxm-1gpu
gpu-check-fake: setup
	FAKE_NVIDIA_SMI_DATA=tests/fake_nvidia_smi/$(GPU_CHECK_SIM) PYTHONPATH=. $(PY) tools/gpu_check.py \
		--nvidia-smi tests/fake_nvidia_smi/nvidia-smi --sim $(GPU_CHECK_SIM) $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
