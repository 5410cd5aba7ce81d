# alphagym workflow. Every rule is generated from the stage table in src/alphagym/pipeline.py (the one
# source of truth, which also renders dvc.yaml); workflow/rules/stages.smk turns its rows into rules.
# Select a profile with `--config profile=smoke` (or `--profile workflow/profiles/smoke`).
import sys

from alphagym.config import load_params
from alphagym.errors import AlphagymError
from alphagym.pipeline import final_targets, stage_rows

configfile: "params.yaml"

# The stages read params.yaml themselves (DVC tracks it, MLflow logs it), so `--config` takes `profile` only:
# any other key would be dropped without a word and the run would not be the one asked for.
import yaml

_FILE = yaml.safe_load(open("params.yaml"))
_IGNORED = sorted(k for k in {*config, *_FILE} if k != "profile" and config.get(k) != _FILE.get(k))
if _IGNORED:
    raise ValueError(f"--config/--configfile set {', '.join(_IGNORED)}: this workflow takes only profile=NAME "
                     "from them; edit params.yaml (or run `dvc exp run -S KEY=VALUE`)")

try:
    PARAMS = load_params("params.yaml", [f"profile={config.get('profile', 'default')}"])
    STAGE_ROWS = stage_rows(PARAMS)
except AlphagymError as exc:       # a bad parameter is the user's to fix: its message, not Snakemake's frames
    sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
    sys.exit(1)


rule all:
    input:
        final_targets(PARAMS, STAGE_ROWS),


include: "workflow/rules/stages.smk"
