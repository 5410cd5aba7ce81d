"""Design briefs: the catalogue as data, held-out families, deterministic drawing, the compliance checker
(worked examples), and clear errors on bad brief files."""

from __future__ import annotations

import copy
import json
from collections import Counter

import numpy as np
import pytest
import yaml

from alphagym.briefs.catalogue import PARTS, load_catalogue, parse_catalogue
from alphagym.briefs.compliance import BriefChecker, check
from alphagym.briefs.contract import failure, max_window, spec_contract, ts_nesting, whole_facts
from alphagym.briefs.generate import contradicts, draw, families, generate, read_briefs, write_briefs
from alphagym.config import load_params
from alphagym.data.simulator import EFFECTS
from alphagym.dsl.parser import parse
from alphagym.errors import BriefError
from alphagym.params import Briefs

CFG = Briefs(train=500, holdout=50, holdout_family_share=0.15, horizon_tolerance=0.5)


@pytest.fixture(scope="module")
def cat():
    return load_catalogue()


@pytest.fixture(scope="module")
def drawn(cat):
    return generate(cat, CFG, 7)


def test_catalogue_is_data_with_enough_options(cat, root):
    assert (root / "src/alphagym/briefs/catalogue.yaml").is_file()
    assert len(cat.ids("mechanisms")) >= 15
    assert all(len(cat.ids(p)) >= 5 for p in PARTS) and len(cat.horizons) >= 5


def test_the_shipped_catalogue_validates_and_its_checks_read_as_written(cat, root):
    raw = yaml.safe_load((root / "src/alphagym/briefs/catalogue.yaml").read_text())
    for part in PARTS:
        for row in raw[part]:
            assert cat.spec(part, row["id"]) == row.get("check", {}), (part, row["id"])


@pytest.mark.parametrize("part, entry, edit, msg", [
    ("mechanisms", "reversal", lambda c: c["require_ops"][0].append("ts_maen"),
     "require_ops.0.6: unknown operator 'ts_maen'"),
    ("forbidden", "long_price_sums", lambda c: c.update(forbid_long_sums=63), "forbid_long_sums: Extra inputs"),
    ("input_rules", "use_vwap", lambda c: c.update(require_fields=[["vwapp"]]),
     "require_fields.0.0: unknown field 'vwapp'"),
    ("structures", "ranked", lambda c: c.update(root="delta"),
     "root: 'delta' is an alias: write the operator's registry name 'ts_delta'"),
    ("input_rules", "price_only", lambda c: c.update(forbid_fields="volume"),
     "forbid_fields: Input should be a valid list"),
    ("structures", "two_ranks", lambda c: c["op_count"].update(op="rnak"), "op_count.op: unknown operator 'rnak'"),
])
def test_a_catalogue_entry_with_a_bad_check_is_refused_by_name(root, part, entry, edit, msg):
    raw = yaml.safe_load((root / "src/alphagym/briefs/catalogue.yaml").read_text())
    bad = copy.deepcopy(raw)
    edit(next(r for r in bad[part] if r["id"] == entry)["check"])
    with pytest.raises(BriefError, match=rf"{part} entry '{entry}': check\.{msg}"):
        parse_catalogue(bad)
    parse_catalogue(raw)


def test_a_catalogue_entry_with_an_unknown_key_is_refused_by_name(root):
    bad = yaml.safe_load((root / "src/alphagym/briefs/catalogue.yaml").read_text())
    bad["risks"][0]["chek"] = {"max_nodes": 5}
    with pytest.raises(BriefError, match=f"risks entry '{bad['risks'][0]['id']}': chek: Extra inputs"):
        parse_catalogue(bad)


def test_counts_and_holdout_families_never_in_training(cat, drawn):
    train, holdout, held = drawn
    assert len(train) == 500 and len(holdout) == 50
    train_fams = {b["family"] for b in train}
    assert {b["family"] for b in holdout} <= set(held)
    assert not train_fams & set(held)
    # held-out families are new combinations of known words: every mechanism and structure is trained on
    assert {b["mechanism"] for b in train} == set(cat.ids("mechanisms"))
    assert {b["structure"] for b in train} == set(cat.ids("structures"))
    assert len(set(held)) == round(0.15 * len(families(cat)))
    assert len({b["text"] for b in train + holdout}) == 550


def test_holdout_briefs_cover_the_held_out_families_evenly_and_every_mechanism(cat, drawn, root):
    _, holdout, held = drawn
    counts = Counter(b["family"] for b in holdout)
    assert set(counts) == set(held) and max(counts.values()) - min(counts.values()) <= 1, counts
    assert {f.split("|")[0] for f in held} == set(cat.ids("mechanisms"))
    # the negative control: the same families drawn at random, as before, are uneven for this seed
    rng = np.random.default_rng([7, 2])
    loose = Counter(b["family"] for b in draw(cat, held, 50, "holdout", rng))
    assert max(loose.values()) - min(loose.values()) > 1, loose
    # the default run's draw asks for every planted edge of the simulator (one mechanism each)
    params = load_params(root / "params.yaml")
    _, default_holdout, _ = generate(cat, params.briefs, int(params.seed))
    edges = {EFFECTS[k].mechanism for k, e in params.simulator.effects.planted.items() if e.kind == "edge"}
    assert len(edges) == 8 and edges <= {b["mechanism"] for b in default_holdout}
    per_mechanism = Counter(b["mechanism"] for b in default_holdout)
    assert max(per_mechanism.values()) <= 6, per_mechanism


def test_same_seed_same_briefs_other_seed_other(cat, drawn, tmp_path):
    again = generate(cat, CFG, 7)
    write_briefs(tmp_path / "a.jsonl", drawn[0])
    write_briefs(tmp_path / "b.jsonl", again[0])
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert generate(cat, CFG, 8)[2] != drawn[2]


def test_rendered_text_has_the_six_fields(drawn):
    text = drawn[0][0]["text"]
    for part in ("PRIMARY mechanism is:", "Target horizon: roughly", "Inputs:", "Structure:", "Constraint:",
                 "Risk preference:"):
        assert part in text


def test_no_contradictory_brief_is_drawn(cat, drawn):
    assert not any(contradicts(cat, b) for b in drawn[0] + drawn[1])
    assert contradicts(cat, {"mechanism": "volume_variability", "horizon": 21, "input_rule": "price_only",
                             "structure": "ranked", "forbidden": "compact", "risk": "steady"})


BRIEF = {"mechanism": "price_volume_divergence", "horizon": 21, "input_rule": "one_corr",
         "structure": "sign_of_relationship", "forbidden": "long_price_sums", "risk": "vol_regime"}


@pytest.mark.parametrize("formula, failed", [
    ("sign(ts_corr(close, volume, 21))", []),
    ("-sign(ts_corr(rank(close), rank(volume), 15))", []),                  # 15 is inside [14, 31.5]
    ("sign(ts_corr(close, volume, 63))", ["horizon"]),
    ("rank(ts_corr(close, volume, 21))", ["structure"]),
    ("sign(ts_corr(close, volume, 21) + ts_corr(open, volume, 21))", ["input_rule"]),
    ("sign(ts_corr(ts_mean(close, 100), volume, 21))", ["horizon", "forbidden"]),
    ("sign(ts_delta(close, 21))", ["mechanism", "input_rule", "structure"]),
])
def test_compliance_worked_examples(cat, formula, failed):
    comp = check(BRIEF, parse(formula), cat, 0.5)
    assert sorted(k for k, ok in comp.checks.items() if not ok) == sorted(failed), comp.reasons
    assert comp.ok == (not failed)
    assert comp.share == pytest.approx(1 - len(failed) / 5)
    assert set(comp.reasons) == set(failed)


def test_check_helpers():
    ast = parse("rank(ts_mean(ts_std(volume, 20) / ts_mean(volume, 60), 5))")
    assert max_window(ast) == 60 and ts_nesting(ast) == 2
    assert max_window(parse("rank(close)")) is None
    assert check_spec({"root": "rank"}, ast) is None
    assert "nests 2" in check_spec({"max_ts_nesting": 1}, ast)
    assert check_spec({"distinct_fields": {"min": 2}}, ast) == "needs at least 2 fields"
    assert "long price sum" in check_spec({"forbid_long_price_sums": 63}, parse("rank(ts_sum(close, 100))"))
    assert check_spec({"forbid_long_price_sums": 63}, parse("rank(ts_sum(volume, 100))")) is None


def test_bad_brief_files_name_file_line_and_field(tmp_path, drawn, cat):
    good = tmp_path / "good.jsonl"
    write_briefs(good, drawn[1][:3])
    assert len(read_briefs(good, cat)) == 3
    rows = [json.loads(x) for x in good.read_text().splitlines()]
    cases = {
        "missing": ({k: v for k, v in rows[1].items() if k != "structure"}, "line 2, field structure"),
        "empty": ({**rows[1], "text": ""}, "empty field (file"),
        "unknown": ({**rows[1], "mechanism": "astrology"}, "unknown id 'astrology'"),
    }
    for name, (bad_row, msg) in cases.items():
        p = tmp_path / f"{name}.jsonl"
        p.write_text("\n".join(json.dumps(r) for r in (rows[0], bad_row, rows[2])) + "\n")
        with pytest.raises(BriefError, match=msg.replace("(", r"\(")):
            read_briefs(p, cat)
    (tmp_path / "json.jsonl").write_text(good.read_text() + "{not json\n")
    with pytest.raises(BriefError, match="not JSON.*line 4"):
        read_briefs(tmp_path / "json.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(BriefError, match="no briefs"):
        read_briefs(tmp_path / "empty.jsonl")
    with pytest.raises(BriefError, match="not found"):
        read_briefs(tmp_path / "nope.jsonl")


def test_compliance_is_the_r14_channel_gated_on_validity(sim_panels, root):
    """R14 = share of the brief's checks passed - 1; gated (the default), an invalid answer earns -1 even
    when it passes every check (`* 0` makes a flat book of a compliant formula); ungated it earns its checks.
    A formula scored without a brief has no compliance metrics and R14 = 0."""
    from alphagym.config import load_params
    from alphagym.verifier.verifier import Verifier

    train = sim_panels[0].slice_days(0, 600)
    answers = ["<alpha>sign(ts_corr(close, volume, 21))</alpha>", "<alpha>rank(ts_delta(close, 5))</alpha>",
               "no tag at all", "<alpha>sign(ts_corr(close, volume, 21)) * 0</alpha>"]
    for gated in (True, False):
        p = load_params(root / "params.yaml", [f"verifier.compliance.gated={str(gated).lower()}",
                                               "verifier.jepa_stress.enabled=false"])
        cards = Verifier(train, p).score_group(answers, brief=BriefChecker(BRIEF, load_catalogue(), 0.5))
        assert [c.metrics["compliant"] for c in cards] == [1.0, 0.0, 0.0, 1.0]
        assert [c.valid for c in cards] == [True, True, False, False]
        assert cards[1].metrics["compliance"] == pytest.approx(1 / 5)     # only the forbidden pattern holds
        assert cards[0].channels["compliance"] == 0.0 and cards[2].channels["compliance"] == -1.0
        assert cards[1].channels["compliance"] == pytest.approx(1 / 5 - 1)
        assert cards[3].channels["compliance"] == (-1.0 if gated else 0.0)
    plain = Verifier(train, p).score_group(answers[:1])
    assert plain[0].channels["compliance"] == 0.0
    assert "compliance" not in plain[0].metrics


def test_idea_is_the_r15_channel_from_the_mechanism_fidelity(sim_panels, root):
    """R15 = min(fidelity / idea_tau - 1, 0), the fidelity measured by the brief's idea check on the panel the
    verifier scores on: a reference formula of the brief's mechanism scores 0 (fidelity 1), another
    mechanism's reference (price-volume correlation) scores below 0; gated, an invalid answer
    scores -1; without an idea check (or a brief) R15 is 0 and no fidelity is recorded."""
    from alphagym.briefs.idea import IdeaCheck
    from alphagym.config import load_params
    from alphagym.verifier import channels as ch
    from alphagym.verifier.verifier import Verifier

    cat = load_catalogue()
    train = sim_panels[0].slice_days(0, 600)
    p = load_params(root / "params.yaml", ["verifier.jepa_stress.enabled=false"])
    brief = {"mechanism": "reversal", "horizon": 5, "input_rule": "price_only", "structure": "ranked",
             "forbidden": "no_powers"}
    answers = ["<alpha>-ts_sum(returns, 5)</alpha>", "<alpha>ts_corr(close, volume, 10)</alpha>", "no tag at all"]
    cards = Verifier(train, p).score_group(answers, brief=BriefChecker(brief, cat, 0.5, idea=IdeaCheck(train, cat)))
    assert [c.valid for c in cards] == [True, True, False]
    assert cards[0].metrics["idea_fidelity"] == pytest.approx(1.0) and cards[0].channels["idea"] == 0.0
    off = cards[1].metrics["idea_fidelity"]
    assert off < cat.idea_tau and cards[1].channels["idea"] == pytest.approx(off / cat.idea_tau - 1)
    assert cards[1].channels["idea"] < 0
    assert cards[2].channels["idea"] == -1.0 and "idea_fidelity" not in cards[2].metrics
    assert ch.idea(None, cat.idea_tau, False, p.verifier.idea.model_copy(update={"gated": False})) == 0.0
    # the check reads the signal the verifier evaluated (one evaluation), and only when it is of its own panel
    idea, other = IdeaCheck(train, cat), IdeaCheck(sim_panels[0].slice_days(0, 400), cat)
    for ic, evaluated in ((idea, 0), (other, 2)):
        calls: list = []
        ic.references("reversal")           # evaluated once per check, before the answers
        ic.signal = lambda ast, s=ic.signal, seen=calls: seen.append(ast) or s(ast)
        Verifier(train, p).score_group(answers, brief=BriefChecker(brief, cat, 0.5, idea=ic))
        assert len(calls) == evaluated
    for scored in (Verifier(train, p).score_group(answers[:2], brief=BriefChecker(brief, cat, 0.5)),
                   Verifier(train, p).score_group(answers[:2])):
        assert [c.channels["idea"] for c in scored] == [0.0, 0.0]
        assert all("idea_fidelity" not in c.metrics for c in scored)


def test_the_sft_evaluation_reads_the_fidelity_the_verifier_measured(sim_panels, root):
    """`policy.evaluate.evaluate_policy` (the SFT stage's evaluation) takes each valid answer's
    `idea_fidelity` from its card, measured on the signal the verifier scored: no second evaluation, the same
    number as the idea check's own, NaN for an invalid answer, and `compliance_idea` from them."""

    from alphagym.briefs.idea import IdeaCheck
    from alphagym.config import load_params
    from alphagym.policy.evaluate import evaluate_policy
    from alphagym.verifier.verifier import Verifier

    class Fixed:                                  # a policy that answers every brief with the same three texts
        def generate(self, texts, n, temperature, seed, progress=None):
            return [["<alpha>-ts_sum(returns, 5)</alpha>", "<alpha>ts_corr(close, volume, 10)</alpha>", "no tag"]
                    for _ in texts]

    cat = load_catalogue()
    train = sim_panels[0].slice_days(0, 600)
    p = load_params(root / "params.yaml", ["verifier.jepa_stress.enabled=false"])
    brief = {"id": "b1", "text": "t", "mechanism": "reversal", "horizon": 5, "input_rule": "price_only",
             "structure": "ranked", "forbidden": "no_powers"}
    idea = IdeaCheck(train, cat)
    expected = [idea.fidelity(idea.signal(parse(f, p.dsl.limits)), "reversal")
                for f in ("-ts_sum(returns, 5)", "ts_corr(close, volume, 10)")]
    calls: list = []
    idea.signal = lambda ast, s=idea.signal: calls.append(ast) or s(ast)
    stats, rows = evaluate_policy(Fixed(), [brief], Verifier(train, p), cat, 0.5, 3, 1.0, 0, idea=idea)
    assert calls == []                            # the verifier's signals, not the check's own
    assert [r["idea_fidelity"] for r in rows[:2]] == pytest.approx(expected) and np.isnan(rows[2]["idea_fidelity"])
    assert stats["compliance_idea"] == pytest.approx(np.mean([f >= cat.idea_tau for f in expected]))


def check_spec(spec, ast):
    """One catalogue entry's check on a whole formula, as the package judges it (`contract.failure`)."""
    return failure(spec_contract(spec), *whole_facts(ast))
