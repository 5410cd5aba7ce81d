"""Architecture, checked: layers point down, each stage declares the code it runs and the params it reads."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

from alphagym.config import ParamsView
from alphagym.errors import ConfigError
from alphagym.pipeline import COMMON_CODE, stage_table
from alphagym.stages import run_stage

BIN = Path(sys.executable).parent
# Modules that cannot change a stage's outputs: typed errors and MLflow logging. A change to them
# rightly does not rerun anything, so they need not be declared.
NEUTRAL = {"alphagym.errors", "alphagym.tracking"}
# Reach a stage through its spec (pipeline.stage_spec: its own row and the schema of its declared params)
SPEC_MODULES = ("alphagym.params", "alphagym.pipeline")


def _lint(cwd: Path, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {})}
    return subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=cwd, capture_output=True, text=True,
                          env=env)


def test_import_contracts_hold(root):
    out = _lint(root)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "0 broken" in out.stdout


@pytest.mark.parametrize("module, imports", [
    ("panel", "alphagym.verifier.channels"),       # a bottom layer importing an area
    ("dsl.tools", "alphagym.pipeline"),           # an area reading the stage table instead of taking paths
    ("engine.scorer", "alphagym.dsl.evaluate"),   # one of a layer's independent modules importing another
])
def test_a_wrong_way_import_breaks_the_layers(root, tmp_path, module, imports):
    """The contract can fail: one import against the order, added to a copy of the package, breaks it."""
    shutil.copytree(root / "src" / "alphagym", tmp_path / "src" / "alphagym",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(root / "pyproject.toml", tmp_path / "pyproject.toml")
    source = tmp_path / "src" / "alphagym" / (module.replace(".", "/") + ".py")
    source.write_text(source.read_text() + f"\nimport {imports}  # noqa\n")
    out = _lint(tmp_path, str(tmp_path / "src"))
    assert out.returncode != 0 and "BROKEN" in out.stdout
    assert f"alphagym.{module} -> {imports}" in out.stdout


def _unlayered(root: Path) -> set[str]:
    """The modules directly under src/alphagym that the package's layers contract does not name, and the
    names it holds that are no such module. A module left out of the layers may import anything."""
    package = root / "src" / "alphagym"
    modules = {f"alphagym.{p.stem}" for p in package.iterdir()
               if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    contracts = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers" and "alphagym.cli" in c["layers"])
    named = {m.strip() for layer in layers for m in re.split(r"[|:]", layer)}
    return modules ^ named


def test_every_module_of_the_package_is_in_a_layer(root, tmp_path):
    assert not _unlayered(root)
    # the check can fail: a new area, or one dropped from the contract
    shutil.copytree(root / "src" / "alphagym", tmp_path / "src" / "alphagym",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "src" / "alphagym" / "newarea").mkdir()
    (tmp_path / "src" / "alphagym" / "newarea" / "__init__.py").write_text("")
    (tmp_path / "pyproject.toml").write_text((root / "pyproject.toml").read_text()
                                             .replace(" | alphagym.books", ""))
    assert _unlayered(tmp_path) == {"alphagym.newarea", "alphagym.books"}


def _covered(module: str, declared: tuple[str, ...]) -> bool:
    parts = module.split(".")
    as_file = "src/" + "/".join(parts) + ".py"
    as_pkg = "src/" + "/".join(parts) + "/__init__.py"
    for d in declared:
        if as_file == d or as_file.startswith(d.rstrip("/") + "/") or as_pkg.startswith(d.rstrip("/") + "/"):
            return True
    return False


def test_declared_code_covers_every_module_a_stage_imports(params):
    """Each stage's `code` must cover every alphagym module its stage function imports, transitively
    (function-level imports included): a change there must rerun the stage under DVC and Snakemake.
    `alphagym.params` and `alphagym.pipeline` reach a stage through its spec instead (`pipeline.stage_spec`:
    its own row and the schema of the params it declares), so the walk stops there: what only they import
    (the rung fold params.py validates rungs with) is not run by a stage that does not import it itself."""
    graph = grimp.build_graph("alphagym")
    for spec_module in SPEC_MODULES:
        graph.remove_module(spec_module)
    for key, stage in stage_table(params).items():
        module = stage.func.split(":")[0]
        used = {module} | graph.find_upstream_modules(module)
        used = {m for m in used if m.startswith("alphagym.") and m not in NEUTRAL}
        missing = sorted(m for m in used if not _covered(m, COMMON_CODE + stage.code))
        assert not missing, f"stage {key!r} runs {missing} but its row in pipeline.py does not declare them"


def test_code_coverage_check_can_fail(params):
    assert not _covered("alphagym.verifier.channels", ("src/alphagym/engine", "src/alphagym/dsl"))
    assert _covered("alphagym.verifier.channels", ("src/alphagym/verifier",))
    assert _covered("alphagym.panel", ("src/alphagym/panel.py",))


def test_params_view_refuses_undeclared_keys(params):
    view = ParamsView(params, ("seed", "verifier.cpcv"), "demo")
    assert view["seed"] == params["seed"] and view.verifier.cpcv.blocks == params["verifier"]["cpcv"]["blocks"]
    assert list(view) == ["seed", "verifier"] and list(view["verifier"]) == ["cpcv"]
    with pytest.raises(ConfigError, match="stage 'demo' read the parameter 'verifier.costs'"):
        view["verifier"]["costs"]
    with pytest.raises(ConfigError, match="'data'"):
        _ = view.data
    assert view.reads == {"seed", "verifier.cpcv"}


@pytest.mark.slow(minutes=1)
def test_every_stage_runs_on_the_params_it_declares(root, tmp_path):
    """Run each stage of the smoke profile in order, each seeing only its declared params (an undeclared
    read raises), and record what it read. Two rungs of the ladder family (one LoRA, one DoRA) stand for
    all six: the members differ only in their own `rl.rungs` block."""
    from alphagym.config import load_params

    # smaller still than the smoke profile: what a stage reads does not depend on how much it does
    p = load_params(root / "params.yaml", ["profile=smoke", f"paths.results={tmp_path}/results",
                                           "tracking.enabled=false", "rl.ladder=[dapo_all,cispo_repo_dora]",
                                           "briefs.train=12", "briefs.holdout=4", "sft.corpus.candidates=60",
                                           "sft.tiny.epochs=1", "filter.min_kept=4", "rl.recipe.steps=2",
                                           "rl.recipe.checkpoint_every=1"])
    assert {k for k in stage_table(p) if k.startswith("train@")} == {"train@dapo_all", "train@cispo_repo_dora"}
    for key, stage in stage_table(p).items():
        reads: set[str] = set()
        run_stage(p, key, reads=reads)
        assert reads, key
        assert all(any(r == d or r.startswith(d + ".") for d in stage.params) for r in reads), key
        assert all(Path(path).exists() for path in stage.outs.values()), key


def _operator_lists(source: str, ops: frozenset[str]) -> list[tuple[int, list[str]]]:
    """Literal tuples, lists and sets in `source` naming three or more registry operators: an operator subset
    written outside the registry (its rows' attributes are where such a subset is declared)."""
    import ast

    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 3 and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            names = [e.value for e in node.elts]
            if sum(n in ops for n in names) >= 3:
                out.append((node.lineno, names))
    return out


def test_operator_subsets_are_attributes_of_the_registrys_rows(root):
    """No module but the registry lists operators: smoothers, signed terms, motif wrappers, parameters and
    the witness and draw orders are read off `dsl.registry`'s rows. A module that writes such a list is
    found (the negative control)."""
    from alphagym.dsl.registry import OPS

    ops = frozenset(OPS)
    found = {str(p.relative_to(root)): hits for p in sorted((root / "src" / "alphagym").rglob("*.py"))
             if p != root / "src/alphagym/dsl/registry.py" and (hits := _operator_lists(p.read_text(), ops))}
    assert not found, found
    assert _operator_lists('SMOOTHERS = frozenset({"ts_sum", "ts_mean", "ts_ema"})\n', ops)


def _bare_columns(source: str, names: frozenset[str]) -> list[tuple[int, str]]:
    """String literals in `source` that are exactly one of the probe table's column names."""
    import io
    import tokenize

    return [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type == tokenize.STRING and t.string[:1] in "\"'" and t.string[1:-1] in names]


def test_the_probe_tables_columns_are_named_once(root):
    """The probe, the books and the report name the probe table's columns through `books.columns`, never as
    bare strings; a module that writes one bare is found (the negative control). A selector's name is a
    params value (`probe.selector: train_cpcv`), not a column, and may be written as one."""
    from alphagym.books import columns
    from alphagym.books.ship import SELECTORS

    names = frozenset(v for k, v in vars(columns).items() if k.isupper() and k != "STEP") - set(SELECTORS)
    src = root / "src" / "alphagym"
    files = [p for d in ("probe", "books", "report") for p in sorted((src / d).glob("*.py"))]
    found = {str(p.relative_to(root)): hits for p in files
             if p.name != "columns.py" and (hits := _bare_columns(p.read_text(), names))}
    assert not found, found
    assert _bare_columns('best = table["holdout_score"].max()\n', names)
