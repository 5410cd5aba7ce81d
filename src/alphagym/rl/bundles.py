"""The trainers of the recipe's companion benchmark, each as a rung `set` over `rl.recipe` (params.yaml).

Copy one into a rung (`rl.rungs.NAME.set`) to run it. GRPO, DAPO and DAPO + refill standardise the
combined reward (one scalar per answer, as TRL does); the others use GDPO over the channels.
"""

from __future__ import annotations

from typing import Any

BUNDLES: dict[str, dict[str, Any]] = {
    "grpo": {"advantage": "combined", "loss": "grpo", "repo.enabled": False},
    "dapo": {"advantage": "combined", "loss": "dapo", "repo.enabled": False},
    "dapo_refill": {"advantage": "combined", "loss": "dapo", "repo.enabled": False, "refill.enabled": True},
    "gdpo": {"advantage": "gdpo", "loss": "dapo", "repo.enabled": False},
    "cispo": {"advantage": "gdpo", "loss": "cispo", "repo.enabled": False},
    "dapo_adapo": {"advantage": "gdpo", "loss": "dapo", "repo.enabled": False, "adapo.enabled": True},
    "dapo_repo": {"advantage": "gdpo", "loss": "dapo", "repo.enabled": True, "repo.warmup": 5},
    "cispo_repo_w5": {"advantage": "gdpo", "loss": "cispo", "repo.enabled": True, "repo.warmup": 5},
}
