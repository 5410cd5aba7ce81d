#!/usr/bin/env bash
# The `gpu` profile's path in one short run (benchmarks/gpu_check.py): NF4 SmolLM2 + LoRA, a short SFT,
# 10 RL steps of the gpu recipe; prints step time, tokens a second and peak GPU memory.
#   bash benchmarks/gpu_check.sh               # on a GPU machine, in under 8 minutes
#   bash benchmarks/gpu_check.sh --cpu-smoke   # the same path shrunk, on the CPU
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}
exec timeout 480 "$PY" benchmarks/gpu_check.py "$@"
