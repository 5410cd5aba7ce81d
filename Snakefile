# alphagym workflow. Rules live in workflow/rules/*.smk, one file per pipeline area; their inputs, outputs
# and commands come from the stage table in src/alphagym/pipeline.py, which also renders dvc.yaml.
# Select a profile with `--config profile=smoke` (or `--profile workflow/profiles/smoke`).
from alphagym.config import load_params
from alphagym.pipeline import final_targets, stage_table

configfile: "params.yaml"

PARAMS = load_params("params.yaml", [f"profile={config.get('profile', 'default')}"])
STAGES = stage_table(PARAMS)


def stage_rule(name):
    """Inputs, outputs and command of one stage, as the rule files use them."""
    s = STAGES[name]
    return s.deps, s.outs, s.cmd


rule all:
    input:
        final_targets(PARAMS),


include: "workflow/rules/data.smk"
include: "workflow/rules/verifier.smk"
include: "workflow/rules/worldmodel.smk"
