"""Build verifiers from the pipeline's outputs: the novelty archive, the kept stress worlds, a panel.

Paths come in as arguments: the callers resolve them from the stage table, which sits above the verifier
(`pipeline.verifier_inputs` for the tools, a stage's deps for the stages), so the `score` tool and later
stages (RL, probe) read exactly the files the stages wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from alphagym.artifacts import read_json
from alphagym.config import results_dir
from alphagym.dsl.alpha101 import alpha101
from alphagym.dsl.evaluate import Evaluator
from alphagym.dsl.parser import Limits
from alphagym.engine.scorer import BookScorer
from alphagym.panel import DSL_FIELDS, Panel
from alphagym.params import Params
from alphagym.verifier.archive import NoveltyArchive
from alphagym.verifier.verifier import Verifier


def seed_archive(panel: Panel, params: Params, progress: bool = True, archive: NoveltyArchive | None = None,
                 scorer: BookScorer | None = None, evaluator: Evaluator | None = None
                 ) -> tuple[NoveltyArchive, dict[str, int]]:
    """Add every usable Alpha101 book that trades (valid under the verifier's rules or not) to an archive.
    `scorer`, `evaluator`: a train-window scorer of `panel` and an evaluator of it to reuse (a verifier's),
    else they are built."""
    from tqdm import tqdm

    scorer = scorer or BookScorer(panel, params.verifier)
    evaluator = evaluator or Evaluator(panel)
    if archive is None:
        archive = NoveltyArchive(int(scorer.rows.sum()), params.verifier.novelty_pnl.capacity)
    alphas = [a for a in alpha101(Limits.from_params(params.dsl.limits), frozenset(DSL_FIELDS)) if a.usable]
    added = 0
    for a in tqdm(alphas, desc="seeding novelty archive", disable=not progress, unit="alpha"):
        before = len(archive)
        archive.add(scorer.net(*evaluator.signal(a.ast))[scorer.rows], a.canonical, f"alpha101#{a.number}")
        added += len(archive) > before
    return archive, {"alphas": len(alphas), "added": added}


def load_kept_worlds(gates_path: Path, worlds_dir: Path, cache_dir: Path | None = None) -> dict[str, Panel]:
    """The worlds the gate report kept (a missing report means no worlds); `cache_dir`: read them through
    `Panel.read_parquet_cached`."""
    if not gates_path.is_file():
        return {}
    kept = read_json(gates_path, what="world-model gate report").get("kept_channels", [])
    return {c: _read(worlds_dir / f"{c}.parquet", cache_dir) for c in kept}


def _read(path: Path, cache_dir: Path | None) -> Panel:
    return Panel.read_parquet(path) if cache_dir is None else Panel.read_parquet_cached(path, cache_dir)


def load_verifier(params: Params, window: str, inputs: Mapping[str, Path]) -> tuple[Verifier, str | None]:
    """A verifier on the train or holdout panel; the train one loads the archive (or seeds it in memory)
    and, with R3 on, the kept stress worlds. Returns a note when something had to be built in memory.
    `inputs`: the files it reads, by role (`pipeline.verifier_inputs`: the panel; for the train window also
    the gate report, the worlds' folder and the archive). Panels are read through dense copies under
    `<results>/cache/panels` (`Panel.read_parquet_cached`): this is the `score` command's start-up."""
    cache = results_dir(params) / "cache" / "panels"
    panel = _read(inputs["panel"], cache)
    if window == "holdout":
        return Verifier(panel, params, window="holdout"), None
    worlds = {}
    if params.verifier.jepa_stress.enabled:
        worlds = load_kept_worlds(inputs["gates"], inputs["worlds"], cache)
    path = inputs["archive"]
    if path.is_file():
        return Verifier(panel, params, NoveltyArchive.load(path), stress_worlds=worlds), None
    verifier = Verifier(panel, params, stress_worlds=worlds)
    seed_archive(panel, params, progress=False, archive=verifier.archive, scorer=verifier.scorer,
                 evaluator=verifier.evaluator)
    return verifier, f"{path} not found: seeded the novelty archive with Alpha101 in memory (run `alphagym archive`)"
