"""Typed config blocks built from a test's own partial dict.

Library code reads typed params sections (`cfg.lr`, not `cfg["lr"]`). A test of one function gives only the
fields that function reads: `model_construct` builds the section without the rest, so a function that starts
reading a field the test did not give fails with an AttributeError naming it, instead of silently reading
params.yaml's value.
"""

from __future__ import annotations

from typing import Any

from alphagym import params as P

_POLICY_PARTS = {"adapter": P.Adapter, "tiny": P.TinyPolicy, "smollm2": P.PretrainedPolicy, "hf": P.HfPolicy}


def partial(model: type[P.Section], fields: dict[str, Any]) -> Any:
    """`model` holding only `fields` (not validated: a test's deliberately partial config)."""
    return model.model_construct(**fields)


def policy_cfg(fields: dict[str, Any]) -> P.Policy:
    """A partial `policy` block, its adapter and backend sub-blocks typed too."""
    return P.Policy.model_construct(**{k: partial(_POLICY_PARTS[k], v) if k in _POLICY_PARTS else v
                                       for k, v in fields.items()})


def updated(model: P.Section, changes: dict[str, Any]) -> Any:
    """`model` (the whole params or one section) with dotted keys replaced, validated again, as a `--set` of
    those keys would give: `updated(params, {"data.start": "2024-01-02"})`."""
    raw = model.model_dump()
    for key, value in changes.items():
        node, parts = raw, key.split(".")
        for part in parts[:-1]:
            node = node[part]
        if parts[-1] not in node:
            raise KeyError(f"{key}: no such key in {type(model).__name__}")
        node[parts[-1]] = value
    return type(model).model_validate(raw)
