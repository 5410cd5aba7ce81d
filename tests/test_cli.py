import re
import subprocess
import sys

import pytest

from alphagym.cli import build_parser, main


def test_help_lists_one_subcommand_per_stage_and_tools():
    """One subcommand per row of the stage table (and its command is the one Snakemake and DVC run), plus
    the tools; nothing else."""
    from alphagym.cli import TOOLS
    from alphagym.pipeline import table_rows

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    rows = table_rows()
    assert set(sub.choices) == {r.command for r in rows} | {name for name, _, _ in TOOLS}
    for r in rows:
        assert r.cmd.split()[:2] == ["alphagym", r.command]
        assert sub.choices[r.command].description == "stage: " + r.help


def test_console_script_runs():
    """The installed `alphagym` entry point (what Snakemake and DVC call) runs, lists every stage and tool
    with its help line, and a stage's own --help names its family option; an unknown command exits 2."""
    from pathlib import Path

    from alphagym.cli import TOOLS
    from alphagym.pipeline import table_rows

    exe = str(Path(sys.executable).with_name("alphagym"))
    out = subprocess.run([exe, "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())                   # argparse wraps long help lines
    for r in table_rows():
        assert f"{r.command} stage: {' '.join(r.help.split())}" in text, r.command
    for name, help_text, _ in TOOLS:
        assert f"{name} tool: {' '.join(help_text.split())}" in text, name
    train = subprocess.run([exe, "train", "--help"], capture_output=True, text=True)
    assert train.returncode == 0 and "--rung" in train.stdout and "--set" in train.stdout
    bad = subprocess.run([exe, "no-such-command"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'no-such-command'" in bad.stderr


def test_user_errors_exit_2_with_one_clear_line(tmp_path, capsys, root):
    code = main(["panel", "--params", str(root / "params.yaml"), "--set", f"paths.results={tmp_path}",
                 "--set", "tracking.enabled=false"])
    err = capsys.readouterr().err
    assert code == 2 and "stage 'panel' needs its input 'prices', not found; run `alphagym download` first" in err
    assert "prices.parquet" in err
    code = main(["download", "--params", str(root / "params.yaml"), "--set", "data.sourcez=csv"])
    assert code == 2 and "unknown key 'data.sourcez'" in capsys.readouterr().err

    # a misspelt rung gets the closest names; a rung defined but off the ladder is told where to add it
    base = ["--params", str(root / "params.yaml"), "--set", "tracking.enabled=false"]
    code = main(["train", "--rung", "cispo_rep", *base])
    err = capsys.readouterr().err
    assert code == 2 and "no --rung 'cispo_rep' for stage 'train'; did you mean --rung cispo_repo " in err, err
    code = main(["train", "--rung", "dapo_all", *base, "--set", "rl.ladder=[cispo_repo]"])
    err = capsys.readouterr().err
    assert code == 2 and "rung 'dapo_all' is defined in rl.rungs but not on the ladder rl.ladder" in err, err
    code = main(["train", "--rung", "zzz", *base])
    err = capsys.readouterr().err
    assert code == 2 and "no --rung 'zzz' for stage 'train' (known: cispo_repo, " in err and "did you mean" not in err

def test_score_and_eval_json_on_a_smoke_panel(tmp_path, capsys, root):
    import json

    from alphagym.verifier.channels import CHANNELS

    common = ["--params", str(root / "params.yaml"), "--set", "profile=smoke", "--set", f"paths.results={tmp_path}",
              "--set", "tracking.enabled=false"]
    assert main(["download", *common]) == 0
    assert main(["panel", *common]) == 0
    capsys.readouterr()
    assert main(["score", "rank(ts_std(volume, 20) / ts_mean(volume, 20))", "--json", *common]) == 0
    card = json.loads(capsys.readouterr().out)
    assert {"valid", "reason", "channels", "metrics"} <= set(card)
    assert list(card["channels"]) == list(CHANNELS)
    assert "seeded the novelty archive" in card["note"]                  # no archive stage run: says so
    assert main(["score", "--answer", "<alpha>rank(close</alpha>", "--json", *common]) == 0
    bad = json.loads(capsys.readouterr().out)
    assert bad["valid"] is False and bad["error_type"] == "syntax" and bad["channels"]["cpcv"] == -0.8
    assert main(["score", "--window", "holdout", "rank(volume)", "--json", *common]) == 0
    assert "holdout_score" in json.loads(capsys.readouterr().out)["metrics"]
    out = tmp_path / "values.parquet"
    assert main(["eval", "ts_mean(close, 5)", "--json", "--out", str(out), *common]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["canonical"] == "ts_mean(close, 5)" and report["lookback"] == 4 and out.is_file()
    assert main(["score", *common]) == 2                                  # neither a formula nor --answer


class _ParseOnlyVerifier:
    """Stands in for the verifier of `alphagym score` without a panel: a card valid when the formula parses
    (every channel 0), invalid with the parser's reason otherwise. Records the texts it was given."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, bool]] = []

    def score(self, text, answer=False):
        from types import SimpleNamespace

        from alphagym.dsl.answer import extract
        from alphagym.dsl.errors import DslError
        from alphagym.dsl.parser import parse
        from alphagym.verifier.channels import CHANNELS

        self.texts.append((text, answer))
        try:
            parse(extract(text) if answer else text)
            error = None
        except DslError as exc:
            error = exc
        card = {"valid": error is None, "reason": str(error) if error else None,
                "error_type": getattr(error, "rule", None), "formula": text, "canonical": None,
                "channels": dict.fromkeys(CHANNELS, 0.0), "metrics": {}, "skipped": {}, "timings_ms": {}}
        return SimpleNamespace(valid=card["valid"], to_json=lambda: dict(card))


def _score(monkeypatch, root, *argv):
    """`alphagym score ARGV` scored by `_ParseOnlyVerifier`: (exit code, verifier)."""
    import alphagym.verifier.loading

    verifier = _ParseOnlyVerifier()
    monkeypatch.setattr(alphagym.verifier.loading, "load_verifier", lambda params, window, inputs: (verifier, None))
    code = main(["score", *argv, "--no-server", "--params", str(root / "params.yaml"),
                 "--set", "tracking.enabled=false"])
    return code, verifier


def test_a_formula_starting_with_minus_is_a_formula_not_an_option(monkeypatch, capsys, root):
    """Many Alpha101 formulas start with '-': `alphagym score '-rank(close)'` scores it (argparse alone reads
    it as an unknown option), wherever it stands among the options; so does `eval`."""
    import json

    for argv in (["-rank(close)", "--json"], ["--json", "-rank(close)"], ["-close", "--json"]):
        code, verifier = _score(monkeypatch, root, *argv)
        out = capsys.readouterr()
        assert code == 0, out.err
        assert verifier.texts == [(next(a for a in argv if a != "--json"), False)]
        assert json.loads(out.out)["valid"] is True
    assert build_parser().parse_args(["eval", "-rank(volume)", "--json"]).formula == "-rank(volume)"
    assert build_parser().parse_args(["score", "--answer", "-x", "--json"]).answer == "-x"


def test_score_of_an_invalid_formula_prints_its_card_and_exits_2(monkeypatch, capsys, root):
    """An invalid formula is the user's error: the card (with the reason) is printed, the exit status is 2,
    and `alphagym score --help` says so. A raw model answer (`--answer`) is scored whatever it holds: an
    invalid one is a score (its penalties), exit 0."""
    import json

    code, _ = _score(monkeypatch, root, "rank(close", "--json")
    card = json.loads(capsys.readouterr().out)
    assert code == 2 and card["valid"] is False and card["error_type"] == "syntax"
    code, _ = _score(monkeypatch, root, "rank(close")
    out = capsys.readouterr().out
    assert code == 2 and "invalid" in out and "missing ')'" in " ".join(out.split())
    assert _score(monkeypatch, root, "rank(close)")[0] == 0
    capsys.readouterr()
    assert _score(monkeypatch, root, "--answer", "<alpha>rank(close</alpha>", "--json")[0] == 0
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["score"]
    assert "exits 2 when the formula is invalid" in " ".join(sub.format_help().split())


def test_ctrl_c_in_a_stage_is_one_line_and_exit_130(monkeypatch, capsys, root):
    """Ctrl-C during a stage (`alphagym train` mid-run) prints one line, no traceback, and exits 130 as a
    shell's interrupted command does; the stage runner has removed its staging by then, and a rerun resumes."""
    import alphagym.stages

    def interrupted(params, key):
        raise KeyboardInterrupt

    monkeypatch.setattr(alphagym.stages, "run_stage", interrupted)
    code = main(["briefs", "--params", str(root / "params.yaml"), "--set", "tracking.enabled=false"])
    err = capsys.readouterr().err
    assert code == 130 and err == "alphagym briefs: interrupted; rerun the same command to resume\n"


def test_the_channel_count_said_is_the_registry_s(root, capsys):
    """`alphagym --help` and the README name as many channels as the registry holds."""
    from alphagym.verifier.channels import CHANNELS

    with pytest.raises(SystemExit):
        main(["--help"])
    said = re.findall(r"verifier's (\d+) channels", capsys.readouterr().out)
    assert said == [str(len(CHANNELS))]
    readme = re.findall(r"(\d+) reward channels", (root / "README.md").read_text())
    assert readme and set(readme) == {str(len(CHANNELS))}
