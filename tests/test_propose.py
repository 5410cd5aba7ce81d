"""`alphagym propose`'s bad input: one clear line and exit 2, before any policy is loaded (its answers on
a real DAG are checked in the end-to-end test, tests/test_pipeline.py, with the holdout panel removed)."""

from __future__ import annotations

import json

import pytest

from alphagym.briefs.catalogue import load_catalogue
from alphagym.cli import main
from alphagym.errors import BriefError
from alphagym.propose.front import brief_from_fields, brief_from_text, read_brief_file

FIELDS = ["--mechanism", "reversal", "--horizon", "21", "--input-rule", "price_only", "--structure", "ranked",
          "--forbidden", "no_argext"]


@pytest.mark.parametrize("argv, says", [
    (["propose", "  "], "empty brief"),
    (["propose", "--mechanism", "reversal", "--horizon", "21"], "needs --input-rule, --structure, --forbidden"),
    # a value given wrong is named before the fields not given
    (["propose", "--mechanism", "reversal", "--horizon", "21", "--inputs", "prices_only"],
     "unknown input_rule id 'prices_only'"),
    (["propose", *FIELDS[:-1], "no_such_rule"], "unknown forbidden id 'no_such_rule'"),
    (["propose", *FIELDS, "-k", "0"], "-k and -n must be at least 1"),
    (["propose", *FIELDS, "-k", "100000000"], "-k is at most 1024 answers a brief"),
    (["propose", *FIELDS, "--temperature", "-1"], "--temperature must be 0 (greedy) or above"),
    (["propose", *FIELDS, "--temperature", "nan"], "--temperature must be 0 (greedy) or above"),
    (["propose"], "give one of: a BRIEF text"),
    (["propose", "a brief", *FIELDS], "give one of"),
    (["propose", *FIELDS, "--checkpoint", "NOT_A_FOLDER"], "NOT_A_FOLDER is not a folder"),
    (["propose", *FIELDS, "--checkpoint", "src"], "src is not a policy or checkpoint folder"),
])
def test_bad_input_is_one_line(argv, says, capsys, monkeypatch, root):
    monkeypatch.chdir(root)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_bad_input_is_refused_before_torch_loads(root, tmp_path):
    """A malformed option or brief is refused before the policy's libraries are imported (a second, not the
    several that torch and transformers take). Control: a good brief does import them, so the check can fail."""
    import subprocess
    import sys

    probe = ("import sys; from alphagym.cli import main; code = main({argv!r}); "
             "print(code, 'torch' in sys.modules, 'transformers' in sys.modules)")

    def run(argv: list[str]) -> str:
        out = subprocess.run([sys.executable, "-c", probe.format(argv=argv)], capture_output=True, text=True,
                             timeout=300, cwd=root)
        return out.stdout.strip().splitlines()[-1]

    assert run(["propose", *FIELDS, "-k", "0"]) == "2 False False"
    assert run(["propose", "--mechanism", "nonsense", *FIELDS[2:]]) == "2 False False"
    assert run(["propose", *FIELDS, "--checkpoint", "NOT_A_FOLDER"]) == "2 False False"     # no such folder
    # control: a folder that looks like a policy is loaded (and fails there: its metadata is empty)
    fake = tmp_path / "policy"
    fake.mkdir()
    (fake / "alphagym_policy.json").write_text("{}")
    assert run(["propose", *FIELDS, "--checkpoint", str(fake)]).split()[1:] == ["True", "True"]


def test_briefs_from_fields_text_and_file(tmp_path):
    cat = load_catalogue()
    b = brief_from_fields(cat, {"mechanism": "reversal", "horizon": 21, "input_rule": "price_only",
                                "structure": "ranked", "forbidden": "no_argext"})
    assert b["risk"] == cat.ids("risks")[0] and brief_from_text(cat, b["text"]) == b    # the text reads back
    assert brief_from_text(cat, "prices only, please") == {
        "text": "prices only, please", "read": {}, "unread": ["mechanism", "horizon", "input_rule", "structure",
                                                              "forbidden"]}
    with pytest.raises(BriefError, match="horizon must be"):
        brief_from_fields(cat, {**b, "horizon": 0})
    f = tmp_path / "briefs.txt"
    f.write_text(f"{json.dumps({'text': b['text']})}\n\nmy own words\n"
                 f"{json.dumps({k: b[k] for k in ('mechanism', 'horizon', 'input_rule', 'structure', 'forbidden')})}\n")
    got = read_brief_file(f, cat)
    assert got == [b, brief_from_text(cat, "my own words"), b] and got[1]["text"] == "my own words"
    f.write_text('{"mechanism": "reversal"}\n')
    with pytest.raises(BriefError, match="line 1"):
        read_brief_file(f, cat)


def test_the_table_piped_keeps_each_formula_on_one_line(capsys):
    """Piped (not a terminal), the table is not wrapped at rich's 80-column default: a long formula stays
    whole on its row, as a user copying it from a file or a pager needs it."""
    from alphagym.cli import _print_proposals

    formula = "rank(ts_corr(ts_rank(close / ts_mean(close, 21), 21), ts_rank(volume, 21), 21))"
    row = {"checks": {"horizon": True}, "train_cpcv": 0.5, "train_sharpe_net": 0.9, "turnover": 0.3, "beta": 0.0,
           "count": 1, "written": formula}
    _print_proposals({"policy": "p", "k": 1, "temperature": 1.0, "seed": 7, "idea_tau": 0.25,
                      "briefs": [{"brief": "b", "constrained": "brief", "valid": 1, "answers": 1, "distinct": 1,
                                  "proposals": [row]}]})
    assert formula in capsys.readouterr().out


def test_a_users_own_words_are_read_into_the_fields_they_name():
    """The front door reads a user's own words: fields named unambiguously (a value's id or the catalogue's
    wording of it, the horizon as days) are read; with every checked field read, the brief is that catalogue
    brief, asked in the catalogue's wording (the user's kept as `asked_as`); otherwise the text alone, with
    what was read and what was not. A value named twice over (two ids) is not read."""
    cat = load_catalogue()
    full = brief_from_text(cat, "A reversal alpha over 21-day windows, price_only inputs, ranked, no_argext")
    want = brief_from_fields(cat, {"mechanism": "reversal", "horizon": 21, "input_rule": "price_only",
                                   "structure": "ranked", "forbidden": "no_argext"})
    assert {k: v for k, v in full.items() if k != "asked_as"} == want and full["asked_as"].startswith("A reversal")
    part = brief_from_text(cat, "reversal, about a 21 day horizon")
    assert part["read"] == {"horizon": 21, "mechanism": "reversal"}
    assert part["unread"] == ["input_rule", "structure", "forbidden"] and "mechanism" not in part
    both = brief_from_text(cat, "reversal or tail_risk, 21-day")
    assert "mechanism" not in both["read"] and "mechanism" in both["unread"]


def test_the_decoder_keeps_a_records_fields_not_its_text_read_back():
    """A brief record's fields are its contract whatever its wording; a bare text, even a catalogue brief's,
    is the grammar's (the decoder never reads a prompt back into fields); a record without the checked
    fields is the grammar's too."""
    from alphagym.briefs.checker import BriefContracts

    cat = load_catalogue()
    b = brief_from_fields(cat, {"mechanism": "reversal", "horizon": 21, "input_rule": "price_only",
                                "structure": "ranked", "forbidden": "no_argext"})
    contracts = BriefContracts(cat, 0.5)
    assert contracts.reads(b) and contracts.reads({**b, "text": "my own words for it"})
    assert not contracts.reads(b["text"]) and not contracts.reads({"text": b["text"]})
    ck = contracts.checker({**b, "text": "my own words for it"})
    assert ck.state("<alpha>ts_argmax(") == "dead"          # the record's forbidden pattern holds
    assert contracts.checker(b["text"]).state("<alpha>ts_argmax(") == "open"
