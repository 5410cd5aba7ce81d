"""The training half's state under a hostile user: a resume contract (never past `steps`, never another
recipe's work), one run of a stage at a time, damaged checkpoints skipped for the one before, dead staging
folders swept, damaged upstream files named, and a fuzz over every stored format a stage reads."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from alphagym.artifacts import read_json, read_jsonl, read_parquet, write_parquet
from alphagym.briefs.generate import read_briefs
from alphagym.errors import AlphagymError, ArtifactError, DataError, ResumeError, StageBusyError
from alphagym.panel import Panel
from alphagym.params import Crowding, Marginal
from alphagym.pipeline import Stage
from alphagym.report.build import read_training_log
from alphagym.rl.env import VerifierEnv
from alphagym.rl.trainer import Trainer, checkpoint_folders
from alphagym.stages import run_stage
from alphagym.verifier.archive import MarginalBook, NoveltyArchive
from alphagym.verifier.verifier import Verifier
from test_rl_trainer import BRIEFS, VolumeEnv, _recipe, _sft_policy

TESTS = Path(__file__).parent
TIMING = ("step_time", "time/generation", "time/scoring", "time/reference", "time/update")


class ArchiveEnv(VerifierEnv):
    """The planted reward of `VolumeEnv` with the real environment's saved state: its novelty archive, its
    record of written formulas and R13's recent families, saved and loaded by `VerifierEnv.save` / `.load`."""

    def __init__(self) -> None:
        self.verifier = SimpleNamespace(archive=NoveltyArchive(12, 64),
                                        cfg=SimpleNamespace(crowding=Crowding(weight=1.0, window=3, same_bet_corr=0.9,
                                                                              max_factor_r2=None),
                                                            marginal=Marginal(size=4, max_corr=0.5)),
                                        scorer=SimpleNamespace(cpcv_of_net=lambda pnl: 0.0))
        self.book = MarginalBook(12, 4, 0.5)              # R16's running book: saved and loaded with the rest
        self.priorities = VolumeEnv.priorities
        self._inner = VolumeEnv()
        self.written = {}
        self.recent = deque(maxlen=3)
        self.bets = {}

    def score(self, answers, brief):
        return self._inner.score(answers, brief)

    def step_metrics(self):
        return {}

    def commit(self, scored):
        for i, s in enumerate(scored):
            if s.valid:
                self.verifier.archive.add(np.sin(np.arange(12.0) * (1 + len(s.canonical) + i)), s.canonical, "t")
                self.written.setdefault(s.canonical, {"train_cpcv": s.core, "train_turnover": 0.1})


@pytest.fixture(scope="module")
def sft_state():
    return _sft_policy()


def _trainer(sft_state, work: Path | None, **recipe) -> Trainer:
    return Trainer(copy.deepcopy(sft_state), ArchiveEnv(), BRIEFS, _recipe(**recipe), seed=3, work=work)


def _untimed(history):
    return [{k: v for k, v in h.items() if k not in TIMING} for h in history]


@pytest.fixture(scope="module")
def killed_run(sft_state, tmp_path_factory):
    """(work folder of a run of 4 steps with checkpoints at 2 and 4, the history of that run)."""
    work = tmp_path_factory.mktemp("killed") / "work"
    history = _trainer(sft_state, work, steps=4, checkpoint_every=2).train()
    return work, _untimed(history)


# --- the resume contract ----------------------------------------------------------------------------------------

def test_a_shorter_recipe_cannot_continue_a_longer_run(sft_state, killed_run, tmp_path):
    """`steps` may differ on resume, but only upwards: a run of 2 steps refuses a checkpoint of step 4 with an
    error naming both numbers and how to start afresh, instead of shipping 4 steps as 2."""
    work, _ = killed_run
    short = _trainer(sft_state, work, steps=2, checkpoint_every=2)
    with pytest.raises(ResumeError, match=r"has done 4 steps, more than this recipe's steps=2.*remove the work "
                                          r"folder .*work.*rl.recipe.steps >= 4"):
        short.load_checkpoint(work / "checkpoint-000004")
    assert short.step == 0 and short.history == []
    longer = _trainer(sft_state, work, steps=6, checkpoint_every=2)      # a longer run continues it
    longer.load_checkpoint(work / "checkpoint-000004")
    assert longer.step == 4


def test_another_recipe_seed_or_context_is_named_not_reused(sft_state, killed_run):
    work, _ = killed_run
    other = _trainer(sft_state, work, steps=4, checkpoint_every=2, lr=1e-4)
    with pytest.raises(ResumeError, match=r"another recipe or seed: lr=0.003 there, 0.0001 here"):
        other.load_checkpoint(work / "checkpoint-000004")
    ctx = Trainer(copy.deepcopy(sft_state), ArchiveEnv(), BRIEFS, _recipe(steps=4, checkpoint_every=2), seed=3,
                  work=work, context={"inputs": {"train": "abc"}})
    with pytest.raises(ResumeError, match=r"inputs.train=None there, 'abc' here"):
        ctx.load_checkpoint(work / "checkpoint-000004")
    code = Trainer(copy.deepcopy(sft_state), ArchiveEnv(), BRIEFS, _recipe(steps=4, checkpoint_every=2), seed=3,
                   work=work, context={"code": "0123abcd"})            # other code than the checkpoint's
    with pytest.raises(ResumeError, match=r"code=None there, '0123abcd' here"):
        code.load_checkpoint(work / "checkpoint-000004")


@pytest.mark.parametrize("damage", ["garble trainer_state.pt", "truncate adapter_model.safetensors",
                                    "truncate archive.npz", "garble alphagym_policy.json",
                                    "remove trainer_state.pt"])
def test_a_damaged_checkpoint_is_named_and_resume_falls_back_to_the_one_before(sft_state, killed_run, tmp_path,
                                                                                damage):
    """A checkpoint cut short or garbled is an ArtifactError naming the file (the trainer unchanged); resuming
    skips and removes it, continues from the newest good one, and ends with the uninterrupted run's log."""
    src, straight = killed_run
    work = tmp_path / "work"
    shutil.copytree(src, work)
    action, name = damage.split()
    target = work / "checkpoint-000004" / name
    data = target.read_bytes()
    if action == "truncate":
        target.write_bytes(data[: len(data) // 2])
    elif action == "garble":
        target.write_bytes(data[:40] + bytes(b ^ 0x5A for b in data[40:80]) + data[80:])
    else:
        target.unlink()
    tr = _trainer(sft_state, work, steps=4, checkpoint_every=2)
    with pytest.raises(ArtifactError, match="checkpoint-000004") as exc:
        tr.load_checkpoint(work / "checkpoint-000004")
    assert name in str(exc.value) or "manifest" in str(exc.value)
    assert tr.step == 0 and tr.history == [] and len(tr.env.verifier.archive) == 0
    resumed, skipped = tr.resume()
    assert resumed == work / "checkpoint-000002" and [p.name for p, _ in skipped] == ["checkpoint-000004"]
    assert name in skipped[0][1] or "incomplete" in skipped[0][1]
    assert [p.name for p in checkpoint_folders(work)] == ["checkpoint-000002"]
    assert _untimed(tr.train()) == straight


def test_when_every_checkpoint_is_damaged_the_run_starts_afresh(sft_state, killed_run, tmp_path):
    src, _ = killed_run
    work = tmp_path / "work"
    shutil.copytree(src, work)
    for ckpt in checkpoint_folders(work):
        (ckpt / "trainer_state.pt").write_bytes(b"\x00" * 10)
    (work / "checkpoint-000006.tmp").mkdir()                  # a save killed mid-write
    tr = _trainer(sft_state, work, steps=4, checkpoint_every=2)
    resumed, skipped = tr.resume()
    assert resumed is None and len(skipped) == 2 and not any(work.iterdir())


# --- one run of a stage at a time; dead staging folders ------------------------------------------------------------

def _rows(tmp_path: Path, func: str, name: str = "demo") -> list[Stage]:
    return [Stage(name, f"stage_funcs:{func}", {}, {"first": f"{tmp_path}/r/{name}.txt"}, ("seed",), ())]


CHILD = """
import sys
sys.path.insert(0, {tests!r})
from alphagym.config import load_params
from alphagym.pipeline import Stage
from alphagym.report.build import read_training_log
from alphagym.stages import run_stage
params = load_params({params!r}, ["paths.results={results}", "tracking.enabled=false"])
run_stage(params, "demo", [Stage("demo", "stage_funcs:slow", {{}}, {{"first": "{out}"}}, ("seed",), ())])
"""


def test_a_second_run_of_a_running_stage_is_refused_and_a_killed_runs_staging_is_swept(params, tmp_path, root):
    """Two runs of one stage on one results folder (`alphagym train --rung X` twice) would share its outputs
    and work folder: the second stops with a StageBusyError naming the first's pid. A SIGKILLed run leaves its
    staging folder behind; the next run of any stage removes it, and the stage can run again."""
    sys.path.insert(0, str(TESTS))
    try:
        results = params["paths"]["results"]
        script = CHILD.format(tests=str(TESTS), params=str(root / "params.yaml"), results=results,
                              out=f"{tmp_path}/r/demo.txt")
        child = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
        staging = Path(results) / ".staging"
        deadline = time.time() + 120
        while not list(staging.glob("demo.*/first/demo.txt")) and time.time() < deadline and child.poll() is None:
            time.sleep(0.1)
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        with pytest.raises(StageBusyError, match=rf"stage 'demo' is already running .* \(pid {child.pid}\)"):
            run_stage(params, "demo", _rows(tmp_path, "quick"))
        child.send_signal(signal.SIGKILL)
        child.wait()
        left = list(staging.glob("demo.*"))
        assert len(left) == 1                                  # what the killed run left
        run_stage(params, "other", _rows(tmp_path, "quick", "other"))
        assert not left[0].exists() and not any(staging.iterdir())
        assert run_stage(params, "demo", _rows(tmp_path, "quick"))["ok"]
        assert (tmp_path / "r/demo.txt").read_text() == "done"
    finally:
        sys.path.remove(str(TESTS))


# --- damaged or inconsistent upstream files ---------------------------------------------------------------------

def test_an_archive_of_another_panel_is_named(sim_panels, params, tmp_path):
    """One profile's archive next to another's panel (`alphagym score`): a DataError naming the archive."""
    train, _ = sim_panels
    path = tmp_path / "archive.npz"
    NoveltyArchive(658, 16).save(path)
    with pytest.raises(DataError, match=r"archive holds P&L of length 658.*rerun `alphagym archive`.*archive.npz"):
        Verifier(train, params, NoveltyArchive.load(path))


# --- fuzz: every stored format a stage reads ---------------------------------------------------------------------

def _panel(sim_panels) -> Panel:
    return sim_panels[0].slice_days(0, 120)


def _answers() -> pd.DataFrame:
    return pd.DataFrame({"step": [0, 0, 2], "valid": [True, False, True], "formula": ["a", "b", "c"],
                         "canonical": ["a", "b", "c"], "brief": ["x", "y", "z"], "train_cpcv": [0.1, np.nan, 0.3]})


def _formats(sim_panels, tmp: Path):
    """kind -> (path of a genuine artifact, the reader a stage uses on it, whether a garble may read as other
    content: JSON text has no checksum and can be garbled into other valid values)."""
    panel = tmp / "train.parquet"
    _panel(sim_panels).write_parquet(panel)
    answers = tmp / "answers.parquet"
    write_parquet(_answers(), answers)
    archive = tmp / "archive.npz"
    arch = NoveltyArchive(30, 8)
    for i in range(5):
        arch.add(np.sin(np.arange(30.0) * (i + 1)), f"c{i}", "x")
    arch.save(archive)
    summary = tmp / "summary.json"
    summary.write_text(json.dumps({"shipped_step": 4, "checkpoints": [0, 2, 4], "selector": "train_cpcv"}, indent=1))
    log = tmp / "log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "reward": 0.1 * s}) + "\n" for s in range(1, 6)))
    briefs = tmp / "briefs.jsonl"
    briefs.write_text("".join(json.dumps({"id": f"b{i}", "split": "train", "family": "fam", "mechanism": "m",
                                          "horizon": 5, "input_rule": "r", "structure": "s", "forbidden": "f",
                                          "risk": "k", "text": "Design an alpha."}) + "\n" for i in range(4)))
    return {
        "panel parquet": (panel, Panel.read_parquet, False),
        "probe answers parquet": (answers, lambda p: read_parquet(p, columns=("step", "valid")), False),
        "archive npz": (archive, NoveltyArchive.load, False),
        "summary json": (summary, lambda p: read_json(p, keys=("shipped_step", "checkpoints")), True),
        "log jsonl": (log, lambda p: read_training_log(p, steps=5), True),
        "briefs jsonl": (briefs, read_briefs, True),
    }


def _damage(data: bytes, rng: np.random.Generator) -> tuple[str, bytes]:
    at = int(rng.integers(1, len(data) - 1))
    if rng.random() < 0.5:
        return f"truncated at {at}", data[:at]
    n = int(rng.integers(1, 9))
    noise = bytes(int(x) for x in rng.integers(0, 256, n))
    return f"garbled at {at}", data[:at] + noise + data[at + n:]


def _same(a, b) -> bool:
    """Equal content, whatever the artifact's type (a panel, a frame, an archive, JSON values)."""
    if isinstance(a, Panel):
        return (a.dates.equals(b.dates) and a.tickers == b.tickers and a.sectors == b.sectors
                and set(a.fields) == set(b.fields) and bool((a.in_holdout == b.in_holdout).all())
                and all(np.array_equal(a.fields[k], b.fields[k], equal_nan=True) for k in a.fields))
    if isinstance(a, pd.DataFrame):
        return a.equals(b)
    if isinstance(a, NoveltyArchive):
        return a.labels == b.labels and np.array_equal(a.rows, b.rows)
    return a == b


def _assert_typed(read, path: Path, how: str, genuine, may_differ: bool) -> bool:
    """True when the damage was caught as a typed error naming the file. When the file still reads, what it
    reads must be the genuine content (damage in bytes no reader uses: statistics, padding), except for a
    garble of JSON text, which has no checksum and may become other valid values, and a brief file cut at a
    line's end (fewer briefs, each whole: nothing records how many there were). Any other exception, or wrong
    content from a checksummed format, fails the test."""
    try:
        got = read(path)
    except AlphagymError as exc:
        assert str(path) in str(exc), f"{how}: the error does not name the file: {exc}"
        return True
    except Exception as exc:            # noqa: BLE001 - the point: nothing untyped gets out
        pytest.fail(f"{path.name} {how}: untyped {type(exc).__name__}: {exc}")
    line_end = how.startswith("truncated") and path.read_bytes().endswith(b"\n")
    assert _same(got, genuine) or (may_differ and how.startswith("garbled")) or (path.name == "briefs.jsonl"
                                                                               and line_end), \
        f"{path.name} {how}: read other content without an error"
    return False


def test_fuzz_damaged_artifacts_end_in_typed_errors_naming_the_file(sim_panels, tmp_path):
    rng = np.random.default_rng(20261203)
    caught: dict[str, int] = {}
    for kind, (path, read, may_differ) in _formats(sim_panels, tmp_path).items():
        good = path.read_bytes()
        genuine = read(path)
        caught[kind] = 0
        for _ in range(25):
            how, bad = _damage(good, rng)
            path.write_bytes(bad)
            caught[kind] += _assert_typed(read, path, how, genuine, may_differ)
        path.write_bytes(good)
    print("caught of 25:", caught)
    assert all(v >= 12 for v in caught.values()), caught     # at least every truncation (about half)


def test_fuzz_damaged_checkpoint_files_are_named_before_anything_loads(sft_state, killed_run, tmp_path):
    """Every file of an RL checkpoint, cut or garbled at random offsets: `read_checkpoint` names it (the
    manifest's sha256 catches what the formats alone would not), and the trainer is left as it was."""
    src, _ = killed_run
    rng = np.random.default_rng(7)
    ckpt = tmp_path / "checkpoint-000004"
    shutil.copytree(src / "checkpoint-000004", ckpt)
    tr = _trainer(sft_state, None, steps=4, checkpoint_every=2)
    before = {k: v.clone() for k, v in tr.policy.model.state_dict().items()}
    files = sorted(p for p in ckpt.rglob("*") if p.is_file())
    assert {"trainer_state.pt", "adapter_model.safetensors", "archive.npz", "alphagym_policy.json",
            "manifest.json", "adapter_config.json", "written.json", "recent_families.json"} <= {p.name for p in files}
    for f in files:
        good = f.read_bytes()
        for _ in range(4):
            how, bad = _damage(good, rng)
            f.write_bytes(bad)
            with pytest.raises(ArtifactError) as exc:
                tr.read_checkpoint(ckpt)
            assert str(ckpt) in str(exc.value), f"{f.name} {how}: {exc.value}"
        f.write_bytes(good)
    tr.read_checkpoint(ckpt)
    assert tr.step == 0
    for k, v in tr.policy.model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_no_stage_error_is_untyped_on_an_unreadable_file(tmp_path):
    """Unreadable bytes in a text artifact (not UTF-8) are typed errors too."""
    for name, read in (("a.json", read_json), ("a.jsonl", read_jsonl), ("b.jsonl", read_briefs)):
        p = tmp_path / name
        p.write_bytes(b"\xff\xfe\x00garbage")
        with pytest.raises(AlphagymError, match=name):
            read(p)
    missing = tmp_path / "nothing.parquet"
    with pytest.raises(ArtifactError, match="not found"):
        read_parquet(missing)
    assert not os.path.exists(missing)


def test_a_saved_policy_with_garbled_weights_is_named(sft_state, tmp_path):
    """Bytes changed inside a saved policy's weights (which safetensors alone would load as other numbers): the
    policy's manifest names the file."""
    from alphagym.errors import PolicyError
    from alphagym.policy.model import load_policy

    folder = copy.deepcopy(sft_state).save(tmp_path / "policy")
    load_policy(folder)
    weights = folder / "base" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-64] ^= 0x01                                    # one bit of one weight
    weights.write_bytes(bytes(data))
    with pytest.raises(PolicyError, match=r"differs from its manifest.*policy/base/model.safetensors"):
        load_policy(folder)


def test_json_as_the_stages_write_it_reads_back(tmp_path):
    """The stages write JSON with Python's json.dumps, whose metrics may be NaN: read back as written."""
    p = tmp_path / "books.json"
    p.write_text(json.dumps({"shipped_step": 4, "equal_weight": {"sharpe": float("nan")}}))
    assert np.isnan(read_json(p, keys=("shipped_step",))["equal_weight"]["sharpe"])
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"step": 1, "kl": float("nan")}) + "\n")
    assert np.isnan(read_jsonl(log, keys=("step",))[0]["kl"])
