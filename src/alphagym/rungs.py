"""Rung resolution: a member of the ladder (`RUNG`, or its seed replica `RUNG-sK`) as it runs.

A rung is written as a diff from its parent: its recipe is `rl.recipe` with the `set` of each rung on its
chain of parents folded in, oldest first (dotted recipe keys; a mapping merges into the inherited one), and
a key that repeats the value a parent rung set is an error. Its change is that diff, computed
(`change_vs_parent`, `describe`), never typed by hand. A replica is the same rung with seed + K. This is
the one place that happens: `Rl` validates each rung's folded recipe, the train and probe stages resolve
their member here, the report reads each rung's change from here, and the stage table asks it for a
member's cores and expected cost. Only the stages that resolve rungs declare this module as code,
so a change here reruns them and nothing else.

It sits below `alphagym.params` and imports nothing of the package: the fold works on plain mappings, and the
validated params and recipes it is handed are used through their attributes.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

REPLICA = re.compile(r"^(.+)-s(\d+)$")
# A DoRA step of the tiny policy costs about 1.5 LoRA steps (5.72 against 3.71 s median a step, the two
# rungs side by side in one `make run`, docs/results.md). Only the order of the rungs depends on it.
DORA_STEP_COST = 1.5


def split_replica(item: str) -> tuple[str, int]:
    """`NAME-sK` -> (NAME, K); any other item -> (item, 0). A replica reruns its item with seed + K."""
    m = REPLICA.match(item)
    return (m.group(1), int(m.group(2))) if m else (item, 0)


def fold_set(recipe: Mapping[str, Any], changes: Mapping[str, Any], name: str,
             set_by: dict[str, str] | None = None) -> dict[str, Any]:
    """The recipe (as plain data) with rung `name`'s `set` applied: dotted keys, each naming a key the recipe
    has; a mapping merges into the inherited mapping key by key (`reward_weights: {crowding: 1.0}` adds one
    weight and keeps the parent's others). Raises KeyError naming `rl.rungs.<name>.set` and the key for one
    the recipe lacks, and for one whose value repeats what a parent rung set (`set_by`: dotted key -> the
    rung that set it, updated here): a rung states only what it changes. Repeating `rl.recipe`'s own value
    is allowed: it pins the key where a profile or `--set` changes the base recipe."""
    raw = copy.deepcopy(dict(recipe))
    set_by = {} if set_by is None else set_by
    where = f"rl.rungs.{name}.set"
    for key, value in changes.items():
        node, parts = raw, key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                raise KeyError(f"{where}: unknown recipe key {key!r}")
            node = node[part]
        if parts[-1] not in node:
            near = difflib.get_close_matches(parts[-1], [str(k) for k in node], n=1)
            raise KeyError(f"{where}: unknown recipe key {key!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
        _put(node, parts[-1], value, key, where, name, set_by)
    return raw


def _put(node: dict[str, Any], leaf: str, value: Any, key: str, where: str, name: str,
         set_by: dict[str, str]) -> None:
    inherited = node.get(leaf)
    if isinstance(value, Mapping) and isinstance(inherited, dict):
        if not value:
            raise KeyError(f"{where}: {key!r} is empty and changes nothing; leave it out")
        for k, v in value.items():
            _put(inherited, str(k), v, f"{key}.{k}", where, name, set_by)
        return
    if key in set_by and inherited == value:
        raise KeyError(f"{where}: {key} = {value!r} repeats the value it inherits from rung {set_by[key]!r}; a "
                       "rung sets only what it changes")
    node[leaf] = copy.deepcopy(value)
    set_by[key] = name


def flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys (`repo.enabled`)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@dataclass(frozen=True)
class ResolvedRung:
    """One member of the ladder as it runs: rung `name`, replica `replica` of it (the item `NAME-sK`), its
    recipe (an `RlRecipe`: `rl.recipe` with the rung's `set`), seed (`seed` + K), the rung's parent and
    change, and what the scheduler needs of it."""

    item: str
    name: str
    replica: int
    recipe: Any
    seed: int
    parent: str
    change: str
    decoding: str | None = None      # the decoding it samples under: `recipe.decoding`, else policy.decoding

    @property
    def threads(self) -> int:
        """Cores it uses: the larger of its torch and numba budgets (the two phases run one after another)."""
        return max(self.recipe.torch_threads, self.recipe.numba_threads)

    @property
    def cost(self) -> float:
        """Expected training time in LoRA steps: its steps, a DoRA step weighted DORA_STEP_COST."""
        return self.recipe.steps * (DORA_STEP_COST if self.recipe.adapter == "dora" else 1.0)

    def tracked(self) -> tuple[dict[str, str], dict[str, str]]:
        """(params, tags) that tell this member's MLflow runs apart from another rung's: every key of its
        resolved recipe as `recipe.<key>` (so runs compare on what they ran, not on the base `rl.recipe`),
        its parent, change and seed as params; rung, replica, item, parent and change as tags (the UI filters
        and groups runs by tags)."""
        params = {f"recipe.{k}": str(v) for k, v in flat(self.recipe.model_dump()).items()}
        if self.decoding is not None:                 # what it ran, not `None` for "policy.decoding's"
            params["recipe.decoding"] = self.decoding
        params.update({"rung.parent": self.parent, "rung.change": self.change, "rung.seed": str(self.seed)})
        tags = {"rung": self.name, "replica": str(self.replica), "item": self.item, "parent": self.parent,
                "change": self.change}
        return params, tags


def chain(rungs: Mapping[str, Any], name: str) -> list[str]:
    """Rung `name` and its parents, nearest first, up to (not including) the SFT policy. `rungs`: the
    `rl.rungs` mapping (validated rungs or plain blocks: each read as `block["parent"]`)."""
    if name not in rungs:
        raise KeyError(f"no rung {name!r} in rl.rungs (rungs: {sorted(rungs)})")
    out = [name]
    while (parent := str(rungs[out[-1]]["parent"])) != "sft":
        if parent in out or parent not in rungs:
            raise KeyError(f"rung {name!r}: its chain of parents {out + [parent]} is broken or a cycle")
        out.append(parent)
    return out


def recipe_of(rl: Any, name: str) -> Any:
    """Rung `name`'s recipe: `rl.recipe` with the `set` of every rung on its chain folded in, oldest first,
    validated as `rl.recipe` is (its own model class). `rl` is the `rl` params or a stage's view of them that
    holds `rl.recipe` and the rungs."""
    raw, set_by = rl.recipe.model_dump(), {}
    for rung in reversed(chain(rl.rungs, name)):
        raw = fold_set(raw, rl.rungs[rung].set, rung, set_by)
    return type(rl.recipe).model_validate(raw)


def resolve_rung(params: Any, item: str) -> ResolvedRung:
    """The one place a ladder member `RUNG` or `RUNG-sK` is resolved (the stage table's threads and
    priorities, the train and probe stages); `params` is the whole params or a stage's view of them."""
    name, replica = split_replica(item)
    rl = params.rl
    rung, recipe = rl.rungs[name], recipe_of(rl, name)
    return ResolvedRung(item, name, replica, recipe, params.seed + replica, rung.parent,
                        describe(change_vs_parent(rl, name)), recipe.decoding or params.policy.decoding)


def change_vs_parent(rl: Any, rung: str) -> dict[str, tuple[Any, Any]]:
    """Recipe keys whose value differs from the parent rung's (the SFT policy's parent: rl.recipe), as
    dotted key -> (parent value, this rung's value): what the ladder table calls the rung's change. A key
    of a mapping (`reward_weights.compliance`) that one side lacks is None there."""
    mine = flat(recipe_of(rl, rung).model_dump())
    parent = rl.rungs[rung].parent
    theirs = flat((recipe_of(rl, parent) if parent != "sft" else rl.recipe).model_dump())
    keys = list(mine) + [k for k in theirs if k not in mine]
    return {k: (theirs.get(k), mine.get(k)) for k in keys if theirs.get(k) != mine.get(k)}


def describe(diff: Mapping[str, tuple[Any, Any]]) -> str:
    """A rung's change in one line, from `change_vs_parent`: `loss: dapo -> cispo; reward_weights.crowding:
    - -> 1.0` (`-`: the key is absent on that side)."""
    def text(v: Any) -> str:
        if isinstance(v, float) and not v.is_integer() and 1e-9 <= abs(v) < 1e9:   # 0.0002 -> 2e-05, not mixed
            return f"{v:.12f}".rstrip("0")
        return "-" if v is None else str(v)
    return "; ".join(f"{k}: {text(a)} -> {text(b)}" for k, (a, b) in diff.items()) or "no recipe change"
