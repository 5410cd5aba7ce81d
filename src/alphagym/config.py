"""Load params.yaml, merge the selected profile and `--set` overrides, validate into `Params`.

One loader for the CLI, Snakemake and the tests, so that all three see the same numbers. Validation
happens here, once: an unknown key, a wrong type or an out-of-range value fails at load with one message
naming the key, the value and what is allowed (`alphagym.params` holds the models).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from alphagym.errors import ConfigError
from alphagym.params import Params

DEFAULT_PARAMS = Path("params.yaml")


class _Loader(yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader):
    """SafeLoader with YAML 1.2 floats and booleans, as DVC reads and writes params.yaml. PyYAML (YAML 1.1)
    reads `1e6` or `1.0e6` as a string, and `off`, `no`, `yes`, `on` as booleans; DVC reads a float and
    strings, and when `dvc exp run -S` rewrites params.yaml it drops the quotes of `"off"`. This loader reads
    what DVC reads, so neither a user's edit nor DVC's rewrite silently changes a value's type.
    libyaml's parser where PyYAML has it (ten times faster on params.yaml: every command reads it)."""

    # copied per class before the resolvers below change it: SafeLoader's own table stays as it is
    yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                              list("tTfF"))

_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                   |\.[0-9_]+(?:[eE][-+][0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def yaml_load(text: str):
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader subclass


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge `over` into a copy of `base` (mappings merge, everything else replaces)."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(item: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (['a','b','c'], parsed value); the value is read as YAML (numbers, lists, bools)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key.sub=value")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"override {item!r} has an empty key")
    try:
        value = yaml_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {item!r}: value is not valid YAML: {exc}") from exc
    return parts, value


def apply_overrides(params: dict[str, Any], overrides: Iterable[str], *, source: str) -> dict[str, Any]:
    out = copy.deepcopy(params)
    for item in overrides:
        parts, value = parse_override(item)
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                raise ConfigError(f"override {item!r}: unknown key {'.'.join(parts[: i + 1])!r} in {source}")
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {'.'.join(parts[: i + 1])!r} is not a mapping")
            node = child
        if parts[-1] not in node and parts != ["profile"]:
            raise ConfigError(f"override {item!r}: unknown key {'.'.join(parts)!r} in {source}")
        node[parts[-1]] = value
    return out


def _describe(error: dict[str, Any]) -> str:
    key = ".".join(str(p) for p in error["loc"])
    given = error.get("input")
    shown = "missing" if error["type"] == "missing" else f"= {given!r}"
    if isinstance(given, Mapping) and error["type"] != "missing":
        shown = "(the block)"        # a cross-field rule: the message names the fields
    return f"{key or '(top level)'} {shown}: {error['msg']}"


def validate(raw: Mapping[str, Any], source: str) -> Params:
    """`Params` from a merged mapping, or one ConfigError listing every bad key."""
    from pydantic import ValidationError

    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        lines = [_describe(e) for e in exc.errors(include_url=False)]
        raise ConfigError(f"{source}: invalid parameters:\n  " + "\n  ".join(lines)) from None


def load_params(path: str | Path = DEFAULT_PARAMS, overrides: Iterable[str] = (),
                profile: str | None = None) -> Params:
    """Read params, apply overrides, merge `profiles[profile]` over the result, validate.

    Overrides are applied twice: before (so `--set profile=real` selects the profile) and after the
    profile merge (so a `--set` always wins over the profile's value). The file's base block is validated
    first, so a bad value there is named as the base's, not as the first profile's that does not override
    it; then the selected profile with the overrides, then every other one, so a typo in one that is not
    selected still fails at once, naming it.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"parameters file {str(path)!r} not found")
    try:
        raw = yaml_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    overrides = list(overrides)
    params = apply_overrides(raw, overrides, source=str(path))
    name = profile or params.get("profile", "default")
    profiles = params.pop("profiles", {}) or {}
    if not isinstance(profiles, dict) or not all(isinstance(v, dict) for v in profiles.values()):
        raise ConfigError(f"{path}: profiles must map each profile name to a block of params")
    if name not in ("default", None) and name not in profiles:
        raise ConfigError(f"{path}: profile {name!r} not defined (known: {sorted(profiles)})")
    base = params
    if name not in ("default", None):
        # the block as the file holds it: a bad `--set` is named with the profile it was given with
        validate({**{k: v for k, v in raw.items() if k != "profiles"}, "profile": "default"},
                 f"{path} (base block)")
        params = _own_results(deep_merge(params, profiles[name]), profiles[name], name)
        params = apply_overrides(params, overrides, source=str(path))
    params["profile"] = name or "default"
    out = validate(params, str(path) if name in ("default", None) else f"{path} (profile {name!r})")
    for other, block in profiles.items():
        if other != name:
            validate({**deep_merge(base, block), "profile": other}, f"{path} (profile {other!r})")
    return out


def _own_results(params: dict[str, Any], block: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A profile writes under its own results folder: `paths.results` of the profile's block, else
    `<paths.results>/<profile>`. So one profile's run never replaces another's outputs, and no stage or
    command meets one profile's artifacts next to another's (a `--set paths.results=...` still wins)."""
    paths = params.get("paths")
    if isinstance(paths, dict) and "results" in paths and "results" not in (block.get("paths") or {}):
        paths["results"] = f"{paths['results']}/{name}"
    return params


def to_builtin(v: Any) -> Any:
    """Params (or a part of them) as plain dicts and lists: JSON-able and comparable, whatever mapping
    or sequence types a view hands out."""
    if isinstance(v, Mapping):
        return {k: to_builtin(v[k]) for k in v}
    if isinstance(v, list | tuple):
        return [to_builtin(x) for x in v]
    return v


def get(params: Mapping[str, Any], dotted: str) -> Any:
    """Read a nested key, failing with the key's full name when it is missing."""
    node: Any = params
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise ConfigError(f"missing parameter {dotted!r}")
        node = node[part]
    return node


def results_dir(params: Mapping[str, Any]) -> Path:
    return Path(get(params, "paths.results"))


class ParamsView(Mapping):
    """The params a stage declares, and nothing else: reading an undeclared key raises ConfigError.

    A stage function receives this view of the validated params (`alphagym.stages.run_stage`), so a stage
    that starts reading a key its stage-table row does not declare fails at once, in every run, instead
    of going stale under DVC and Snakemake. Keys read are recorded in `reads` (the tests use it).

    It stands in for `Params` (stage functions are annotated so): `view.verifier.cpcv` reads as on the model, and
    a declared block comes back as its typed section (`Cpcv`), a partly declared one as a narrower view.
    """

    def __init__(self, node: Mapping[str, Any], allowed: tuple[str, ...], stage: str, prefix: str = "",
                 reads: set[str] | None = None) -> None:
        self._node, self._allowed, self._stage, self._prefix = node, allowed, stage, prefix
        self.reads: set[str] = set() if reads is None else reads

    def _path(self, key: str) -> str:
        return f"{self._prefix}.{key}" if self._prefix else key

    def _covered(self, path: str) -> bool:
        return any(path == a or path.startswith(a + ".") for a in self._allowed)

    def _visible(self, path: str) -> bool:
        return self._covered(path) or any(a.startswith(path + ".") for a in self._allowed)

    def __getitem__(self, key: str) -> Any:
        path = self._path(key)
        if not self._visible(path):
            raise ConfigError(f"stage {self._stage!r} read the parameter {path!r}, which its row in the stage "
                              f"table (src/alphagym/pipeline.py) does not declare; declare it there")
        value = self._node[key]
        if self._covered(path):
            self.reads.add(path)
            return value
        return ParamsView(value, self._allowed, self._stage, path, self.reads)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __iter__(self):
        return (k for k in self._node if self._visible(self._path(k)))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"ParamsView({self._stage!r}, {self._prefix or '<root>'}, declared={list(self._allowed)})"
