"""The probe, books and report stages on a small real fixture: a tiny SFT policy, two checkpoints, the
simulated panels. Checkpoint selection sees train numbers only (and runs before the holdout is scored); an
incomplete checkpoint is refused by name; the books and the report come out of the probe's files; a rung
that failed is marked in the report, not dropped."""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import alphagym.probe.stage as probe_stage
from alphagym.artifacts import write_manifest
from alphagym.briefs.catalogue import CHECKS, load_catalogue
from alphagym.briefs.generate import generate, read_briefs, write_briefs
from alphagym.config import load_params
from alphagym.data.build_panel import build_panel
from alphagym.data.sources import load_source
from alphagym.errors import ConfigError, DataError, PolicyError
from alphagym.params import Policy, SftRun
from alphagym.pipeline import stage_table
from alphagym.policy.backends import wrap_adapter
from alphagym.policy.model import build_policy
from alphagym.policy.sft import train_sft
from alphagym.probe.select import select_checkpoint
from alphagym.rl.checkpoints import list_checkpoints
from alphagym.rl.env import WRITTEN
from alphagym.stages import run_stage
from cfg_helpers import partial

ROOT = Path(__file__).resolve().parents[1]
WRITTEN_POOL = {   # formula -> train numbers as scored when written (the archive book's pool)
    "rank(ts_std(volume, 20) / ts_mean(volume, 20))": {"train_cpcv": 2.0, "train_turnover": 0.2},
    "rank(ts_std(volume, 21) / ts_mean(volume, 21))": {"train_cpcv": 1.9, "train_turnover": 0.2},   # the same bet
    "rank(ts_mean(close, 126))": {"train_cpcv": 1.8, "train_turnover": 0.01},                      # hardly trades
    "rank(-ts_delta(log(close), 5))": {"train_cpcv": 1.5, "train_turnover": 0.6},
    "rank(close": {"train_cpcv": 1.4, "train_turnover": 0.3},                  # no longer parses: skipped
}
FORMULAS = ["<alpha>rank(ts_max(volume / ts_mean(volume, 10), 20))</alpha>",
            "<alpha>rank(-ts_delta(close, 5))</alpha>", "<alpha>rank(ts_std(returns, 20))</alpha>"]


def test_selection_takes_the_best_train_cpcv_and_the_earlier_step_on_a_tie():
    t = pd.DataFrame({"step": [0, 100, 200, 300], "train_cpcv": [-1.0, 0.5, 0.7, 0.7], "valid": [3, 4, 5, 5]})
    assert select_checkpoint(t) == 200
    assert select_checkpoint(t.iloc[::-1]) == 200


def test_the_capped_book_selector_reads_the_capped_books_train_sharpe():
    """The diversity-valuing selector picks the checkpoint whose capped book does best on train, even where
    the answers' mean CPCV prefers another; an unknown selector is a config error."""
    t = pd.DataFrame({"step": [0, 100, 200], "train_cpcv": [0.1, 0.9, 0.5],
                      "train_capped_sharpe": [0.2, 1.0, 2.5]})
    assert select_checkpoint(t) == 100 and select_checkpoint(t, "capped_book") == 200
    with pytest.raises(ConfigError, match="no selector 'best'"):
        select_checkpoint(t, "best")


def test_the_ship_rule_prefers_a_diverse_book_to_a_collapse_that_does_about_as_well():
    """Two checkpoints: a one-formula collapse (1.01 effective bets) with a slightly higher train CPCV and capped
    book Sharpe, and a diverse one (6 bets) whose capped book is within 10%: `capped_book_bets` ships the diverse
    one where `train_cpcv` and `capped_book` ship the collapse. A clearly better book still ships, one bet or not."""
    t = pd.DataFrame({"step": [100, 200], "train_cpcv": [1.54, 1.20], "train_capped_sharpe": [2.00, 1.85],
                      "train_effective_bets": [1.01, 6.0]})
    assert select_checkpoint(t, "train_cpcv") == 100 and select_checkpoint(t, "capped_book") == 100
    assert select_checkpoint(t, "capped_book_bets") == 200
    clearly = t.assign(train_capped_sharpe=[3.0, 1.85])
    assert select_checkpoint(clearly, "capped_book_bets") == 100
    # across rungs the report applies the same rule to the rungs' shipped checkpoints
    from alphagym.report.build import RungResult, shipped_rung

    def rung(item, row):
        return RungResult(item, item, 0, "sft", "x", probe={"shipped": row})

    collapse, diverse = (rung(n, r) for n, r in zip(("grammar", "brief"), t.drop(columns="step").to_dict("records")))
    assert shipped_rung([collapse, diverse], "capped_book_bets") is diverse
    assert shipped_rung([collapse, diverse], "train_cpcv") is collapse


def test_selection_refuses_holdout_columns():
    t = pd.DataFrame({"step": [0, 100], "train_cpcv": [0.1, 0.2], "holdout_score": [5.0, -5.0]})
    with pytest.raises(ConfigError, match="holdout"):
        select_checkpoint(t)
    with pytest.raises(ConfigError, match="no checkpoints"):
        select_checkpoint(pd.DataFrame({"step": [], "train_cpcv": []}))


def _build_ladder(tmp: Path, overrides: list[str], panels=None, rung: str | None = "cispo_repo"):
    """A results folder with everything the probe needs for `rung` (two checkpoints; None: the profile's
    first rung), on the profile `overrides` select: its panels (`panels`, else built from its source) and
    its ground truth (the simulator's effects, decoys and traps, or real data's note that there is none)."""
    # the grammar alone: the tiny policy below writes the same few formulas whatever the brief, and these
    # tests are about the probe's bookkeeping (brief decoding through the probe: the end-to-end test)
    params = load_params(ROOT / "params.yaml", [f"paths.results={tmp}/results", "tracking.enabled=false",
                                                "briefs.holdout=6", "rl.recipe.max_new_tokens=64", "rl.seeds=1",
                                                "policy.decoding=grammar", *overrides])
    table = stage_table(params)
    rung = rung or params.rl.ladder[0]
    deps = table[f"probe@{rung}"].deps
    prices, sectors, truth = load_source(params)
    train, holdout = panels if panels is not None else build_panel(prices, sectors, params)[:2]
    for key, panel in (("train", train), ("holdout", holdout)):
        Path(deps[key]).parent.mkdir(parents=True, exist_ok=True)
        panel.write_parquet(deps[key])
    Path(deps["truth"]).parent.mkdir(parents=True, exist_ok=True)
    Path(deps["truth"]).write_text(json.dumps(truth, default=float))
    cat = load_catalogue()
    _, held, _ = generate(cat, params.briefs, 7)
    Path(deps["briefs_holdout"]).parent.mkdir(parents=True, exist_ok=True)
    write_briefs(Path(deps["briefs_holdout"]), held)
    cfg = {**params.policy.model_dump(), "threads": 1,
           "tiny": {"vocab_size": 400, "hidden_size": 32, "intermediate_size": 64, "layers": 2, "heads": 4,
                    "kv_heads": 2, "max_positions": 256, "adapter": "none"}}
    texts = [b["text"] for b in held]
    pol = build_policy("tiny", Policy.model_validate(cfg), texts + FORMULAS, seed=0)
    train_sft(pol, texts * 6, (FORMULAS * len(texts) * 2)[: len(texts) * 6],
              partial(SftRun, {"eval_share": 0.05, "batch_size": 16, "epochs": 30, "lr": 1e-2, "weight_decay": 0.0,
                               "warmup_share": 0.05, "max_grad_norm": 1.0, "eval_every": 1000}), 0)
    pol.save(deps["policy"])
    torch.manual_seed(0)
    pol.model = wrap_adapter(pol.model, params.policy.adapter, "lora")
    for step in (2, 4):
        with torch.no_grad():
            for name, p in pol.model.named_parameters():
                if "lora_B" in name:
                    p.add_(0.02 * torch.randn_like(p))
        # as the trainer saves one: its config hash in the metadata, its state beside the adapter
        folder = pol.save(Path(deps["checkpoints"]) / f"checkpoint-{step:06d}", {"step": step, "config_hash": "x"})
        torch.save({"step": step}, folder / "trainer_state.pt")
        if step == 4:                                  # what the rung wrote in training, as the trainer saves it
            (folder / WRITTEN).write_text(json.dumps(WRITTEN_POOL))
        write_manifest(folder)
    return params, table


@pytest.fixture(scope="module")
def ladder(tmp_path_factory, sim_panels):
    """The probe's inputs on the default simulated market."""
    return _build_ladder(tmp_path_factory.mktemp("ladder"), [], sim_panels)


@pytest.fixture(scope="module")
def real_ladder(tmp_path_factory, shared_data):
    """The probe's inputs on the `real` profile (the shared prices; skipped when they are absent)."""
    return _build_ladder(tmp_path_factory.mktemp("real_ladder"), ["profile=real", f"data.csv_dir={shared_data}"],
                         rung=None)


def test_probe_selects_on_train_numbers_before_scoring_the_holdout(ladder, monkeypatch):
    params, table = ladder
    events: list[str] = []
    real_select, real_holdout, real_verifier = (probe_stage.select_checkpoint, probe_stage.holdout_phase,
                                                 probe_stage.Verifier)

    def spy_select(t, selector):
        events.append(f"select:{selector}")
        assert not [c for c in t.columns if "holdout" in c], list(t.columns)
        return real_select(t, selector)

    def spy_verifier(panel, p, *a, window="train", **k):
        events.append(f"verifier:{window}")
        return real_verifier(panel, p, *a, window=window, **k)

    def spy_holdout(*a, **k):
        events.append("holdout")
        return real_holdout(*a, **k)

    monkeypatch.setattr(probe_stage, "select_checkpoint", spy_select)
    monkeypatch.setattr(probe_stage, "Verifier", spy_verifier)
    monkeypatch.setattr(probe_stage, "holdout_phase", spy_holdout)
    out = run_stage(params, "probe@cispo_repo")
    assert events == ["verifier:train", "select:train_cpcv", "select:capped_book", "select:capped_book_bets",
                      "verifier:holdout", "holdout"]
    outs = table["probe@cispo_repo"].outs
    t = pd.read_parquet(outs["table"])
    assert list(t["step"]) == [0, 2, 4]
    assert t["shipped"].sum() == 1 and int(t.loc[t["shipped"], "step"].iloc[0]) == out["shipped_step"]
    # the default selector ships: the capped book's train Sharpe, with the bets floor (`books.ship`)
    assert params.probe.selector == "capped_book_bets"
    train_cols = t[["step", "train_cpcv", "train_capped_sharpe", "train_effective_bets"]]
    assert select_checkpoint(train_cols, "capped_book_bets") == out["shipped_step"]
    assert t["pass_at_k"].between(0, 1).all() and {"families", "holdout_effective_bets", "capped_answers"} <= set(t)
    # the holdout score's interval from the bootstrap over briefs holds the score; the sampled answers' mean
    # score has its own, and the spread one answer a brief puts on the score is a standard deviation
    s = t.dropna(subset=["holdout_score_sampled"])
    assert len(s) and ((s["holdout_score_sampled_low"] <= s["holdout_score_sampled"])
                       & (s["holdout_score_sampled"] <= s["holdout_score_sampled_high"])).all()
    assert (t["holdout_answer_sd"].dropna() >= 0).all()
    assert ((t["holdout_score_low"] <= t["holdout_score"]) & (t["holdout_score"] <= t["holdout_score_high"])).all()
    assert t["sampled_families"].ge(0).all()      # the samples' families, beside the greedy answers' ones
    # the fixture decodes under the grammar: no brief to complete, by check either
    assert (t[["forced_lacking", *(f"forced_lacking_{k}" for k in CHECKS)]] == 0).all().all()
    # the reading measure of free-sampled answers, per checkpoint: shares, and gaps between -1 and 1
    assert t["reading_parse"].between(0, 1).all() and t["reading_gap_horizon"].dropna().between(-1, 1).all()
    assert {f"reading_own_{k}" for k in CHECKS} <= set(t.columns)
    assert t["valid"].ge(1).all() and t["families"].ge(1).all()   # the bet counts see real answers
    assert (t["families_positive"] <= t["families"]).all() and (t["train_capped_sharpe"].notna()).all()
    summary = json.loads(Path(outs["summary"]).read_text())
    capped_pick = int(t.sort_values(["train_capped_sharpe", "step"], ascending=[False, True]).iloc[0]["step"])
    best = int(t.sort_values(["train_cpcv", "step"], ascending=[False, True]).iloc[0]["step"])
    assert summary["picks"]["capped_book"]["step"] == capped_pick and summary["selector"] == "capped_book_bets"
    assert summary["picks"]["train_cpcv"]["step"] == best
    assert summary["picks"]["capped_book_bets"]["step"] == out["shipped_step"]
    edges = sum(e.kind == "edge" for e in params.simulator.effects.planted.values())
    assert edges >= 8 and (t["planted_edges"] == edges).all() and t["planted_edges_expressed"].between(0, edges).all()
    a = pd.read_parquet(outs["answers"])
    assert len(a) == 3 * 6 and set(a["step"]) == {0, 2, 4}
    # each brief check's pass rate: the five average to the mean compliance share, answer by answer and per step
    checks = [f"compliance_{k}" for k in CHECKS]
    assert a[checks].isin([0.0, 1.0]).all().all()
    assert np.allclose(a[checks].mean(axis=1), a["compliance"]) and np.allclose(t[checks].mean(axis=1), t["compliance"])
    # a valid answer has a holdout score exactly when it is valid on the holdout year too
    assert (a["holdout_score"].notna() == a["holdout_valid"]).all()
    assert not (a["holdout_valid"] & ~a["valid"]).any()
    summary = json.loads(Path(outs["summary"]).read_text())
    assert summary["selector"] == "capped_book_bets" and summary["shipped_step"] == out["shipped_step"]


def test_on_real_data_the_probe_counts_bets_without_coverage(real_ladder):
    """The `real` profile's probe: every bet-counting column is computed on the real holdout year, and the
    coverage columns, which need the simulator's ground truth, are absent rather than zero."""
    params, table = real_ladder
    probe = f"probe@{params.rl.ladder[0]}"
    run_stage(params, probe)
    t = pd.read_parquet(table[probe].outs["table"])
    assert list(t["step"]) == [0, 2, 4]
    for col in ("valid", "families", "families_positive", "holdout_mean_abs_corr", "holdout_effective_bets",
                "capped_answers", "capped_effective_bets", "compliance", "compliant_share", "pass_at_k",
                "sampled_families", "train_capped_sharpe", "train_effective_bets"):
        assert col in t.columns, col
    assert t["valid"].ge(1).all() and t["families"].ge(1).all() and t["pass_at_k"].between(0, 1).all()
    assert t["holdout_effective_bets"].notna().all() and t["compliance"].between(0, 1).all()
    assert not [c for c in t.columns if c.startswith("planted") or c == "decoy_trap_answers"]


def _train_outputs(table) -> None:
    """The train stage's log and summary, and the world-model gates, as the report reads them."""
    tr = table["train@cispo_repo"].outs
    Path(tr["log"]).write_text("".join(json.dumps({"step": s, "reward": 0.1 * s, "core_score/mean": 0.0,
                                                   "kl": 0.0, "entropy": 1.0, "repo/zeta": 0.01,
                                                   "frac_nonzero_advantage": 1.0,
                                                   "decoding/forced_lacking": 2.0, "decoding/forced_late": 0.0})
                                       + "\n" for s in (1, 2, 3, 4)))
    Path(tr["summary"]).write_text(json.dumps({"steps": 4}))
    gates = Path(table["report"].deps["gates"])
    gates.parent.mkdir(parents=True, exist_ok=True)
    gates.write_text(json.dumps({"kept": []}))
    sft = Path(table["report"].deps["sft_report"])       # the SFT stage's report, with its reading measure
    sft.parent.mkdir(parents=True, exist_ok=True)
    sft.write_text(json.dumps({"backend": "tiny", "after_reading": {
        "answers": 24.0, "parse": 0.5, "own_checks": 0.7, "own_all": 0.3, "random_checks": 0.4, "random_all": 0.05,
        **{f"gap_{k}": 0.1 for k in CHECKS}}}))


def test_the_archive_book_is_chosen_on_train_numbers_before_the_holdout_sees_it(ladder, monkeypatch):
    """The archive book walks the rung's written formulas in train-CPCV order with the capped book's rules
    (the same bet and a static book are left out; a formula that no longer parses is skipped), and only the
    chosen ones are ever scored on the holdout year, after the choice."""
    import alphagym.books.stage as books_stage

    assert books_stage.WRITTEN == WRITTEN                # the books read the file the trainer writes
    params, table = ladder
    if not Path(table["probe@cispo_repo"].outs["summary"]).exists():
        run_stage(params, "probe@cispo_repo")
    events: list[tuple[str, str]] = []
    real_verifier, real_stream = books_stage.Verifier, books_stage.capped_stream

    def spy_verifier(panel, p, *a, window="train", **k):
        v = real_verifier(panel, p, *a, window=window, **k)
        score = v.score_one

        def logged(formula, *aa, **kk):
            events.append((window, formula))
            return score(formula, *aa, **kk)

        v.score_one = logged
        return v

    def spy_stream(*a, **k):
        chosen = real_stream(*a, **k)
        events.append(("chosen", ""))
        return chosen

    monkeypatch.setattr(books_stage, "Verifier", spy_verifier)
    monkeypatch.setattr(books_stage, "capped_stream", spy_stream)
    run_stage(params, "books@cispo_repo")
    books = json.loads(Path(table["books@cispo_repo"].outs["books"]).read_text())
    assert books["archive_members"] == ["rank(ts_std(volume, 20) / ts_mean(volume, 20))",
                                        "rank(-ts_delta(log(close), 5))"]
    assert books["archive_pool"] == len(WRITTEN_POOL) and books["archive"]["answers"] == 2
    after = events[events.index(("chosen", "")) + 1:]
    held = {f for w, f in events if w == "holdout" and f in WRITTEN_POOL}
    assert held == set(books["archive_members"]) and all(("holdout", f) in after for f in held)
    daily = pd.read_parquet(table["books@cispo_repo"].outs["daily"])
    assert daily["archive"].notna().all()


def test_books_and_report_come_from_the_probe_and_mark_a_failed_rung(ladder):
    params, table = ladder
    if not Path(table["probe@cispo_repo"].outs["summary"]).exists():
        run_stage(params, "probe@cispo_repo")
    run_stage(params, "books@cispo_repo")
    books = json.loads(Path(table["books@cispo_repo"].outs["books"]).read_text())
    daily = pd.read_parquet(table["books@cispo_repo"].outs["daily"])
    assert {"date", "market"} <= set(daily.columns) and len(daily) > 200
    if books["equal_weight"] is not None:
        assert books["equal_weight"]["answers"] == sum(r["count"] for r in books["answers"])
    # the positive book holds exactly the answers that paid on the train window, each weighed by its count
    paid = sum(r["count"] for r in books["answers"] if r["train_cpcv"] > 0)
    assert (books["positive"] or {"answers": 0})["answers"] == paid
    assert ("positive" in daily) and daily["positive"].notna().any() == (paid > 0)
    _train_outputs(table)
    out = run_stage(params, "report")
    assert out["shipped_rung"] == "cispo_repo"
    assert set(out["failed"]) == set(params.rl.ladder) - {"cispo_repo"}
    rep = table["report"].outs
    md = Path(rep["report"]).read_text()
    for rung in params.rl.ladder:
        assert f"| {rung} |" in md                     # every rung has its row, the failed ones marked
    assert md.count("FAILED or not run") >= len(params.rl.ladder) - 1
    exported = json.loads(Path(rep["json"]).read_text())      # strict JSON (no NaN)
    unrun = next(r for r in params.rl.ladder if r != "cispo_repo")
    assert exported["rungs"]["cispo_repo"]["ok"] and not exported["rungs"][unrun]["ok"]
    assert len(exported["rungs"]["cispo_repo"]["answers"]) == 18
    assert set(exported["rewards"]["priorities"]) == set(exported["rewards"]["channels"])
    assert {p.name for p in Path(rep["figures"]).glob("*.png")} == {
        "training_curves.png", "selector_vs_holdout.png", "answer_scores.png", "growth.png", "book_vs_market.png"}
    assert "## Brief compliance by check" in md and "compliance_horizon" in md
    assert "## Does the policy read its brief?" in md and "gap_horizon" in md
    assert "## Does the SFT policy read its brief?" in md and "| tiny | after SFT | 24 | 0.500 |" in md
    assert "## Bets over training" in md and "holdout_mean_abs_corr" in md
    # the fixture samples under the grammar alone: no requirement for the decoder to write, no such table
    assert "## Requirements the decoder wrote" not in md
    card = (Path(rep["adapter"]) / "README.md").read_text()
    assert "cispo_repo" in card
    pairs = pd.read_parquet(rep["pairs"])
    assert not pairs.duplicated(["brief", "canonical"]).any()


def test_propose_answers_from_the_shipped_rl_adapter(ladder, monkeypatch):
    """The report ships an RL checkpoint (step 4 here, as a real run ships a trained step) and `propose`, with
    its default checkpoint, loads it: the shipped folder's manifest matches what the report left in it (the
    model card over peft's README.md, the trainer's state dropped)."""
    import alphagym.report.stage as report_stage
    from alphagym.propose.propose import load_proposer

    params, table = ladder
    for stage in ("probe@cispo_repo", "books@cispo_repo"):
        if not Path(table[stage].outs["summary" if stage.startswith("probe") else "books"]).exists():
            run_stage(params, stage)
    _train_outputs(table)
    real = report_stage.shipped_rung

    def ships_step_4(results, selector):
        ship = real(results, selector)
        ship.probe = {**ship.probe, "shipped_step": 4}
        return ship

    monkeypatch.setattr(report_stage, "shipped_rung", ships_step_4)
    run_stage(params, "report")
    shipped = Path(table["report"].outs["adapter"])
    assert "step 4" in (shipped / "README.md").read_text()
    assert not (shipped / "trainer_state.pt").exists()
    policy, where = load_proposer(params, shipped, Path(table["probe@cispo_repo"].deps["policy"]))
    assert where == str(shipped)
    [[answer]] = policy.generate([read_briefs(Path(table["report"].deps["briefs_holdout"]))[0]], n=1,
                                 temperature=0.0)
    assert isinstance(answer, str)


def test_an_incomplete_checkpoint_is_refused_by_name(tmp_path):
    good, bad = tmp_path / "checkpoint-000100", tmp_path / "checkpoint-000200"
    for p in (good, bad):
        p.mkdir()
        for f in ("adapter_config.json", "adapter_model.safetensors", "alphagym_policy.json", "manifest.json"):
            (p / f).write_text("{}")
    (bad / "adapter_model.safetensors").unlink()
    with pytest.raises(PolicyError, match="checkpoint-000200 is an incomplete checkpoint: adapter_model"):
        list_checkpoints(tmp_path)
    (bad / "adapter_model.safetensors").write_text("{}")
    assert [s for s, _ in list_checkpoints(tmp_path)] == [100, 200]
    (tmp_path / "stray").mkdir()
    with pytest.raises(PolicyError, match="stray"):
        list_checkpoints(tmp_path)


def test_a_report_with_no_finished_rung_is_an_error(tmp_path):
    params = load_params(ROOT / "params.yaml", [f"paths.results={tmp_path}/results", "tracking.enabled=false"])
    gates = Path(stage_table(params)["report"].deps["gates"])
    gates.parent.mkdir(parents=True)
    gates.write_text("{}")
    Path(stage_table(params)["report"].deps["briefs_holdout"]).parent.mkdir(parents=True)
    Path(stage_table(params)["report"].deps["briefs_holdout"]).write_text("")
    Path(stage_table(params)["report"].deps["sft_report"]).parent.mkdir(parents=True)
    Path(stage_table(params)["report"].deps["sft_report"]).write_text("{}")
    with pytest.raises(DataError, match="no rung has finished"):
        run_stage(params, "report")


def test_a_damaged_shipped_adapter_is_a_policy_error_naming_it(ladder, tmp_path):
    """A checkpoint's adapter cut short on disk: the probe names the file instead of a SafetensorError."""
    from alphagym.rl.checkpoints import at_checkpoint, sft_base

    params, table = ladder
    deps = table["probe@cispo_repo"].deps
    ckpt = tmp_path / "checkpoint-000002"
    shutil.copytree(Path(deps["checkpoints"]) / "checkpoint-000002", ckpt)
    weights = ckpt / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(PolicyError, match=r"checkpoint-000002 cannot be used.*adapter_model.safetensors"):
        at_checkpoint(sft_base(Path(deps["policy"]), params.policy, params.dsl.limits,
                               params.briefs.horizon_tolerance), ckpt)


@contextmanager
def _altered(path: Path, text: str | bytes):
    """`path` holds `text` inside the block, its own bytes again after it."""
    good = Path(path).read_bytes()
    Path(path).write_bytes(text if isinstance(text, bytes) else text.encode())
    try:
        yield
    finally:
        Path(path).write_bytes(good)


def test_books_and_report_refuse_damaged_or_inconsistent_probe_outputs(ladder):
    """A shipped step that is not among the checkpoints, answers without the `valid` column, and a books file
    cut short are typed errors naming the file; a stage that failed once started leaves no output behind, and
    one whose input is cut short stops before it starts, leaving the last run's outputs as they were."""
    params, table = ladder
    if not Path(table["probe@cispo_repo"].outs["summary"]).exists():
        run_stage(params, "probe@cispo_repo")
    probe_outs, books_outs = table["probe@cispo_repo"].outs, table["books@cispo_repo"].outs
    summary = json.loads(Path(probe_outs["summary"]).read_text())
    with _altered(probe_outs["summary"], json.dumps({**summary, "shipped_step": 999})):
        with pytest.raises(DataError, match=r"shipped step 999 is not among the probe's checkpoints \[0, 2, 4\]"):
            run_stage(params, "books@cispo_repo")
        assert not Path(books_outs["books"]).exists()
    answers = pd.read_parquet(probe_outs["answers"])
    no_valid = Path(probe_outs["answers"]).with_name("no_valid.parquet")
    answers.drop(columns=["valid"]).to_parquet(no_valid)
    with _altered(probe_outs["answers"], no_valid.read_bytes()):
        with pytest.raises(DataError, match=r"lacks the column\(s\) 'valid'.*answers.parquet"):
            run_stage(params, "books@cispo_repo")
    run_stage(params, "books@cispo_repo")
    _train_outputs(table)
    books = Path(books_outs["books"])
    report = Path(table["report"].outs["report"])
    before = report.read_bytes() if report.exists() else None
    with _altered(books, books.read_bytes()[:-20]):
        with pytest.raises(DataError, match=r"stage 'report' cannot read its input 'books@cispo_repo' .*not valid "
                                            r"JSON.*books.json"):
            run_stage(params, "report")
        assert (report.read_bytes() if report.exists() else None) == before


def test_the_probe_run_carries_the_shipped_checkpoint_for_the_mlflow_comparison(ladder, tmp_path):
    """MLflow's run comparison shows a metric's last step; the probe run logs the shipped checkpoint's row
    as `shipped/*` metrics without a step, so the UI compares rungs on what they ship."""
    import sqlite3

    params, table = ladder
    results = Path(table["probe@cispo_repo"].outs["table"]).parents[3]
    tracked = load_params(ROOT / "params.yaml", [f"paths.results={results}", "tracking.enabled=true",
                                                 f"tracking.uri={tmp_path}/mlflow.db", "briefs.holdout=6",
                                                 "rl.recipe.max_new_tokens=64", "policy.decoding=grammar"])
    run_stage(tracked, "probe@cispo_repo")
    shipped = json.loads(Path(table["probe@cispo_repo"].outs["summary"]).read_text())["shipped"]
    db = sqlite3.connect(tmp_path / "mlflow.db")
    logged = dict(db.execute("SELECT key, value FROM latest_metrics WHERE key LIKE 'shipped/%'").fetchall())
    assert logged["shipped/holdout_score"] == pytest.approx(shipped["holdout_score"])
    assert logged["shipped/families"] == shipped["families"] and "shipped/holdout_effective_bets" in logged
    assert logged["shipped/step"] == shipped["step"]


def test_a_rung_that_sets_its_decoding_samples_under_it_and_the_others_under_the_policys(ladder):
    """`rl.recipe.decoding`: the control rung `cispo_repo_grammar` samples under the grammar alone (no brief
    contracts), in training and in its probe (both build on `sft_base`); a rung that leaves it null samples
    as `policy.decoding` says (brief)."""
    from alphagym.rl.checkpoints import sft_base
    from alphagym.rungs import resolve_rung

    params, table = ladder                       # built with policy.decoding=grammar: the default's is brief
    policy_dir = Path(table["probe@cispo_repo"].deps["policy"])
    control, default = resolve_rung(params, "cispo_repo_grammar").recipe, resolve_rung(params, "cispo_repo").recipe
    assert (control.decoding, default.decoding) == ("grammar", None)
    args = (policy_dir, params.policy.model_copy(update={"decoding": "brief"}), params.dsl.limits,
            params.briefs.horizon_tolerance)
    grammar, brief = sft_base(*args, control.decoding), sft_base(*args, default.decoding)
    assert grammar.grammar is not None and grammar.contracts is None
    assert brief.contracts is not None and brief.grammar is brief.contracts.grammar
