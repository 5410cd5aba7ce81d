import subprocess
import sys

from alphagym.cli import build_parser, main


def test_help_lists_one_subcommand_per_stage_and_tools():
    help_text = build_parser().format_help()
    for name in ("download", "panel", "calibrate", "dag"):
        assert name in help_text


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "alphagym.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "download" in out.stdout


def test_user_errors_exit_2_with_one_clear_line(tmp_path, capsys, root):
    code = main(["panel", "--params", str(root / "params.yaml"), "--set", f"paths.results={tmp_path}",
                 "--set", "tracking.enabled=false"])
    err = capsys.readouterr().err
    assert code == 2 and "raw data not found; run `alphagym download` first" in err and "prices.parquet" in err
    code = main(["download", "--params", str(root / "params.yaml"), "--set", "data.sourcez=csv"])
    assert code == 2 and "unknown key 'data.sourcez'" in capsys.readouterr().err
