# gputopo: the README's first commands. `make demo` sets up and runs the main job on a built-in
# simulated machine; `make test` sets up and runs the tests. Both work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
# The CPU wheel of torch (on a GPU machine: `make setup TORCH=torch` for the CUDA build).
TORCH  ?= torch==2.13.0
SIM    ?= seed-8gpu
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test perf clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check "$(TORCH)"
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/gputopo scan --sim $(SIM)
	$(VENV)/bin/gputopo bench --sim $(SIM) --quick

test: setup
	$(PY) -m pytest -q

perf: setup
	$(PY) benchmarks/scan_speed.py
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/sweep_time.py

clean:
	rm -rf $(VENV) build *.egg-info
