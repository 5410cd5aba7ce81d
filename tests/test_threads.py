"""Process-wide settings come from one explicit call, `alphagym.configure_runtime()` (the CLI and the stage
runner make it): numpy's BLAS then runs on one thread whatever was imported first, unless the user set
OPENBLAS_NUM_THREADS. Importing alphagym alone changes nothing in the host process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, os
from threadpoolctl import threadpool_info
{imports}
blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
print(json.dumps({{"blas": blas, "env": os.environ.get("OPENBLAS_NUM_THREADS"),
                  "omp": os.environ.get("OMP_WAIT_POLICY")}}))
"""


def _blas_threads(imports: str, **env: str) -> dict:
    base = {k: v for k, v in os.environ.items()
            if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", PROBE.format(imports=imports)], capture_output=True, text=True,
                         env={**base, **env}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@pytest.mark.skipif(_cores() < 2, reason="OpenBLAS starts one thread on a one-core machine anyway")
def test_numpy_alone_starts_a_blas_thread_per_core():
    """The control: without alphagym, OpenBLAS sizes its pool to the cores (so the tests below can fail)."""
    assert _blas_threads("import numpy")["blas"] == [min(_cores(), 64)]


@pytest.mark.skipif(_cores() < 2, reason="OpenBLAS starts one thread on a one-core machine anyway")
@pytest.mark.parametrize("imports", ["import alphagym\nimport numpy", "import numpy\nimport alphagym.dsl.evaluate",
                                     "import numpy\nfrom alphagym.verifier.verifier import Verifier\n"
                                     "from alphagym.dsl.evaluate import Evaluator"])
def test_importing_alphagym_changes_nothing_in_the_host_process(imports):
    got = _blas_threads(imports)
    assert got == {"blas": [min(_cores(), 64)], "env": None, "omp": None}


@pytest.mark.parametrize("imports", [
    "import alphagym\nalphagym.configure_runtime()\nimport numpy",
    "import numpy\nimport alphagym\nalphagym.configure_runtime()",
    "import numpy\nfrom alphagym.verifier.verifier import Verifier\nimport alphagym\nalphagym.configure_runtime()",
    # the CLI makes the call before it parses its arguments
    "from alphagym import cli\ntry:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\nimport numpy",
])
def test_blas_runs_on_one_thread_once_the_runtime_is_configured(imports):
    got = _blas_threads(imports)
    assert got["blas"] == [1], got
    assert got["env"] == "1"          # spawned workers (the verifier's pool) inherit it
    assert got["omp"] == "PASSIVE"


@pytest.mark.skipif(_cores() < 2, reason="needs two cores to tell a user's 2 from the default")
def test_a_users_own_setting_wins():
    got = _blas_threads("import alphagym\nalphagym.configure_runtime()\nimport numpy", OPENBLAS_NUM_THREADS="2",
                        OMP_WAIT_POLICY="ACTIVE")
    assert got == {"blas": [2], "env": "2", "omp": "ACTIVE"}


def test_the_heap_thresholds_are_set_on_glibc():
    import sys as _sys

    from alphagym import runtime

    runtime.configure_runtime()
    assert runtime._done == _sys.platform.startswith("linux")


def test_building_a_policy_or_a_world_model_leaves_torchs_threads_alone(sim_panels):
    """torch's thread count is the stage's to set: the library functions a notebook calls do not change it
    (the control: the stage function does set it, so the check can fail)."""
    import torch

    from alphagym.config import load_params
    from alphagym.params import Policy
    from alphagym.policy.model import build_policy
    from alphagym.worldmodel.train import train_world_model
    from test_worldmodel_train import CFG

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        params = load_params(os.path.join(os.path.dirname(__file__), "..", "params.yaml"), [])
        cfg = Policy.model_validate({**params.policy.model_dump(), "threads": 2,
                                     "tiny": {**params.policy.tiny.model_dump(), "vocab_size": 300,
                                              "hidden_size": 16, "intermediate_size": 32, "layers": 1}})
        build_policy("tiny", cfg, ["rank(close)", "rank(volume)"], seed=0)
        assert torch.get_num_threads() == 1
        train_world_model(sim_panels[0].slice_days(0, 200), CFG.model_copy(update={"threads": 2}), seed=0,
                          progress=False)
        assert torch.get_num_threads() == 1
        torch.set_num_threads(cfg.threads)            # what the sft stage does first
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
