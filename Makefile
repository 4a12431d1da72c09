# gputopo: the README's first commands. `make demo` sets up and runs the main job on a built-in
# simulated machine; `make test` sets up and runs the tests. Both work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
# The CPU wheel of torch (on a GPU machine: `make setup TORCH=torch` for the CUDA build).
TORCH  ?= torch==2.13.0
SIM    ?= seed-8gpu
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo lint test perf clean

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
	$(VENV)/bin/ruff check gputopo tests benchmarks

# What CI runs (.ci/run): fails on a type or lint error as on a failing test.
test: lint
	$(PY) -m pytest -q

# Every script docs/performance.md quotes (several minutes on 2 cores).
perf: setup
	$(PY) benchmarks/scan_speed.py
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/sweep_time.py
	$(PY) benchmarks/demo_time.py
	$(PY) benchmarks/pair_floor.py
	$(PY) benchmarks/cluster_scale.py
	$(PY) benchmarks/history_cost.py

clean:
	rm -rf $(VENV) build *.egg-info
