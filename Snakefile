# alphagym workflow. Every rule is generated from the stage table in src/alphagym/pipeline.py (the one
# source of truth, which also renders dvc.yaml); workflow/rules/stages.smk turns its rows into rules.
# Select a profile with `--config profile=smoke` (or `--profile workflow/profiles/smoke`).
from alphagym.config import load_params
from alphagym.pipeline import final_targets, stage_rows

configfile: "params.yaml"

PARAMS = load_params("params.yaml", [f"profile={config.get('profile', 'default')}"])
STAGE_ROWS = stage_rows(PARAMS)


rule all:
    input:
        final_targets(PARAMS, STAGE_ROWS),


include: "workflow/rules/stages.smk"
