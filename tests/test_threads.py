"""numpy's BLAS runs on one thread in every alphagym process (alphagym/__init__.py), whatever was imported first,
unless the user set OPENBLAS_NUM_THREADS."""

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
print(json.dumps({{"blas": blas, "env": os.environ.get("OPENBLAS_NUM_THREADS")}}))
"""


def _blas_threads(imports: str, **env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", PROBE.format(imports=imports)], capture_output=True, text=True,
                         env={**base, **env}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@pytest.mark.skipif(_cores() < 2, reason="OpenBLAS starts one thread on a one-core machine anyway")
def test_numpy_alone_starts_a_blas_thread_per_core():
    """The control: without alphagym, OpenBLAS sizes its pool to the cores (so the tests below can fail)."""
    assert _blas_threads("import numpy")["blas"] == [min(_cores(), 64)]


@pytest.mark.parametrize("imports", ["import alphagym\nimport numpy", "import numpy\nimport alphagym",
                                     "import numpy\nfrom alphagym.verifier.verifier import Verifier"])
def test_blas_runs_on_one_thread_in_alphagym(imports):
    got = _blas_threads(imports)
    assert got["blas"] == [1], got
    assert got["env"] == "1"          # spawned workers (the verifier's pool) inherit it


@pytest.mark.skipif(_cores() < 2, reason="needs two cores to tell a user's 2 from the default")
def test_a_users_own_setting_wins():
    got = _blas_threads("import alphagym\nimport numpy", OPENBLAS_NUM_THREADS="2")
    assert got == {"blas": [2], "env": "2"}
