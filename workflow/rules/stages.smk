# One rule per row of the stage table (STAGE_ROWS, set by the including Snakefile, with PARAMS).
# - inputs, outputs, threads, priority and the shell command come from the row;
# - rule params hold the values of the params keys the row declares, a content hash of its code and its spec
#   hash (`pipeline.stage_spec`), so Snakemake's params trigger reruns a stage whose params, code or spec
#   changed (as DVC does);
# - a family row (e.g. the ladder's rungs) becomes one rule with a wildcard;
# - on success, `dvc commit --no-relink` records what ran in dvc.lock and the DVC cache, so `dvc status`
#   agrees with Snakemake and `dvc push` has the outputs to send; it leaves the outputs' files (and mtimes)
#   as they are, so the next `snakemake -n` plans nothing.
import json
import shutil
import subprocess
from pathlib import Path

from alphagym.pipeline import (COMMON_CODE, SPECS, code_hash, dvc_yaml, expand, params_values, profile_block,
                               spec_hash, specs_yaml, stage_table)

RESULTS_ROOT = str(PARAMS["paths"]["results"])


def _stage_rule_paths(row, paths):
    wc = row.family.wildcard if row.family else None
    return {k: (v.replace("{item}", "{" + wc + "}") if wc else v) for k, v in paths.items()}


def _command(row):
    if row.family is None:
        return row.cmd
    return lambda wildcards, r=row: expand(r, wildcards[r.family.wildcard]).cmd


def _per_member(row, attr, flag):
    """The row's `attr` (threads, priority), or a function of the wildcard giving each rung its own when the
    row's `flag` (threads_of_rung, priority_of_rung) says it depends on the rung's recipe."""
    if row.family is None or not getattr(row, flag):
        return getattr(row, attr)
    return lambda wildcards, r=row: getattr(expand(r, wildcards[r.family.wildcard], params=PARAMS), attr)


def _values(row):
    if row.family is None:
        values = params_values(PARAMS, row.params)
        if row is STAGE_ROWS[0]:
            # the sentinel, as dvc.yaml renders it: any edit of the profile block reruns it (writing the same
            # bytes, its outputs keep their mtimes), so both tools name the same stages for a profile key
            values[f"profiles.{PARAMS['profile']}"] = profile_block("params.yaml", PARAMS["profile"])
        return json.dumps(values, sort_keys=True)
    return lambda wildcards, r=row: json.dumps(
        params_values(PARAMS, expand(r, wildcards[r.family.wildcard]).params), sort_keys=True)


for _row in STAGE_ROWS:
    _wc = _row.family.wildcard if _row.family else None
    _outs = _stage_rule_paths(_row, _row.outs)
    _log = f"{RESULTS_ROOT}/logs/{_row.name}" + (f"_{{{_wc}}}" if _wc else "") + ".log"

    rule:
        name:
            _row.name
        input:
            **_stage_rule_paths(_row, _row.deps),
        output:
            **{k: (directory(v) if k in _row.directories else v) for k, v in _outs.items()},
        # the directives below are read when the rule is defined, except `shell`, which runs later in this
        # file's namespace (the loop variables would hold the last row by then): the command travels as a
        # rule param instead.
        params:
            cmd=_command(_row),
            values=_values(_row),
            code=code_hash(tuple(COMMON_CODE) + tuple(_row.code)) + ":" + spec_hash(_row),
        threads: _per_member(_row, "threads", "threads_of_rung")
        priority: _per_member(_row, "priority", "priority_of_rung")
        log:
            _log,
        shell:
            "{params.cmd} > {log:q} 2>&1"


onsuccess:
    dvc = shutil.which("dvc")
    if workflow.touch:
        # `--touch` ran no stage (`make pull` marks outputs DVC already checked as up to date): nothing to record
        pass
    elif dvc is None or not Path(".dvc").is_dir():
        print("alphagym: not a DVC repository (or no dvc on PATH): dvc.lock not updated")
    elif not Path("dvc.yaml").is_file() or Path("dvc.yaml").read_text() != dvc_yaml(PARAMS, STAGE_ROWS):
        # dvc.yaml's stages have this run's names but another profile's paths: committing them would
        # record outputs this run did not write
        render = f"alphagym dag --write-dvc dvc.yaml --set profile={PARAMS['profile']}"
        print(f"alphagym: the run succeeded; dvc.yaml describes another profile or ladder than this run, so "
              f"dvc.lock was not updated. To "
              f"record this run (for `dvc status` and `dvc push`): `{render}`, then `dvc commit --force "
              f"--no-relink` (it leaves the outputs' mtimes alone); render before the next run to have it "
              f"recorded by itself")
    elif not Path(SPECS).is_file() or Path(SPECS).read_text() != specs_yaml():
        print(f"alphagym: {SPECS} is not the stage table's (render it with `alphagym dag --write-dvc dvc.yaml`): "
              "dvc.lock not updated")
    else:
        done = [key for key, s in stage_table(PARAMS, STAGE_ROWS).items()
                if all(Path(p).exists() for p in s.outs.values())]
        if done:
            # --no-relink: the outputs go into the cache and stay as they are in the workspace (a relink would
            # rewrite every file, renew its mtime, and make Snakemake see inputs newer than their outputs)
            print(f"alphagym: recording {len(done)} stages in dvc.lock and the DVC cache (dvc commit)")
            res = subprocess.run([dvc, "commit", "--force", "--quiet", "--no-relink", *done], capture_output=True,
                                 text=True)
            if res.returncode:
                print(f"alphagym: `dvc commit` failed, dvc.lock not updated:\n{res.stderr}")
            else:
                print(f"alphagym: recorded {', '.join(done)} in dvc.lock and the DVC cache")
