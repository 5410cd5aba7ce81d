# alphagym workflow. Every rule is generated from the stage table in src/alphagym/pipeline.py (the one
# source of truth, which also renders dvc.yaml); workflow/rules/stages.smk turns its rows into rules.
# Select a profile with `--config profile=smoke` (or `--profile workflow/profiles/smoke`).
from alphagym.config import load_params
from alphagym.config import results_dir
from alphagym.pipeline import final_targets, table_rows

configfile: "params.yaml"

PARAMS = load_params("params.yaml", [f"profile={config.get('profile', 'default')}"])
_PROFILE = PARAMS["profile"]
STAGE_ROWS = table_rows(results_dir(PARAMS).as_posix(),
                        "" if _PROFILE == "default" else f" --set profile={_PROFILE}")


rule all:
    input:
        final_targets(PARAMS, STAGE_ROWS),


include: "workflow/rules/stages.smk"
