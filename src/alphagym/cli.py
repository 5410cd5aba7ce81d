"""`alphagym`: one subcommand per pipeline stage, plus tools.

Every stage reads params.yaml (`--params`), accepts `--set key.sub=value` overrides and logs to MLflow.
Errors the user can fix (bad data, bad formula, bad parameter) print one clear line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from alphagym.config import load_params
from alphagym.errors import AlphagymError, ConfigError


def _params(args: argparse.Namespace) -> dict[str, Any]:
    return load_params(args.params, args.set)


def cmd_download(args: argparse.Namespace) -> int:
    from alphagym.data.stages import run_download

    paths = run_download(_params(args))
    print(f"wrote {paths['prices']}")
    return 0


def cmd_panel(args: argparse.Namespace) -> int:
    from alphagym.data.stages import run_panel

    paths = run_panel(_params(args))
    print(json.dumps(json.loads(paths["summary"].read_text()), indent=1))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from alphagym.data.stages import run_calibrate

    print(run_calibrate(_params(args), args.from_dir, args.out), end="")
    return 0


def cmd_dag(args: argparse.Namespace) -> int:
    from alphagym.pipeline import dvc_yaml, stage_table, upstream_outputs

    params = _params(args)
    if args.write_dvc:
        Path(args.write_dvc).write_text(dvc_yaml(params))
        print(f"wrote {args.write_dvc}")
        return 0
    table = stage_table(params)
    reads = upstream_outputs(table)
    for name, stage in table.items():
        print(f"{name}: {stage.cmd}\n  reads: {sorted(reads[name]) or '-'}\n  writes: {sorted(stage.outs.values())}")
    return 0


def cmd_stylized(args: argparse.Namespace) -> int:
    from alphagym.panel import Panel
    from alphagym.data.stylized import stylized_facts

    print(json.dumps(stylized_facts(Panel.read_parquet(args.panel)), indent=1))
    return 0


def cmd_compare_facts(args: argparse.Namespace) -> int:
    from alphagym.data.stages import run_compare_facts

    print(run_compare_facts(_params(args), args.from_dir, plot=args.plot))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from alphagym.dsl.tools import print_report, run_eval

    report = run_eval(_params(args), args.formula, args.panel, args.out)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print_report(report)
    return 0


def cmd_alpha101(args: argparse.Namespace) -> int:
    from alphagym.dsl.tools import print_alpha101, run_alpha101

    print_alpha101(run_alpha101(_params(args), args.panel), args.json)
    return 0


def cmd_archive(args: argparse.Namespace) -> int:
    from alphagym.verifier.tools import run_archive

    print(f"wrote {run_archive(_params(args))}")
    return 0


def cmd_world_model(args: argparse.Namespace) -> int:
    from alphagym.worldmodel.stage import run_world_model

    report = run_world_model(_params(args))
    print(json.dumps({"pass": report["pass"], "kept_channels": report["kept_channels"],
                      "prediction": report["prediction"]["pass"]}, indent=1))
    return 0


def cmd_gates(args: argparse.Namespace) -> int:
    from alphagym.config import results_dir
    from alphagym.errors import AlphagymError
    from alphagym.worldmodel.stage import gates_markdown

    path = Path(args.report) if args.report else results_dir(_params(args)) / "world_model" / "gates.json"
    if not path.is_file():
        raise AlphagymError(f"no gate report at {path}: run `alphagym world-model` first")
    print(gates_markdown(json.loads(path.read_text())))
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from alphagym.verifier.tools import card_json, load_verifier, print_card

    if (args.formula is None) == (args.answer is None):
        raise ConfigError("give either a FORMULA or --answer TEXT")
    params = _params(args)
    verifier, note = load_verifier(params, args.window)
    card = verifier.score(args.answer if args.answer is not None else args.formula, answer=args.answer is not None)
    if args.plot and card.valid:
        from alphagym.report.plots import book_figure

        note = (note + "; " if note else "") + f"figure: {book_figure(card, verifier, args.plot)}"
    if args.json:
        print(card_json(card, note))
    else:
        print_card(card, params["verifier"]["priorities"], note)
    return 0


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default="params.yaml", help="parameters file (default: params.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a parameter, e.g. --set data.source=csv (repeatable)")


COMMANDS: list[tuple[str, str, Callable[[argparse.Namespace], int]]] = [
    ("download", "stage: fetch or simulate raw daily prices (data.source)", cmd_download),
    ("panel", "stage: validate, adjust and split the raw prices into train and holdout panels", cmd_panel),
    ("calibrate", "tool: fit the simulator to a folder of real per-ticker CSV files", cmd_calibrate),
    ("dag", "tool: show the stage table, or write dvc.yaml from it", cmd_dag),
    ("stylized", "tool: stylized facts of a panel file", cmd_stylized),
    ("archive", "stage: seed the novelty archive with the Alpha101 books on the train panel", cmd_archive),
    ("world-model", "stage: train the JEPA world model, write stress worlds and the gate report", cmd_world_model),
    ("gates", "tool: the world-model gate report as markdown tables (as in the README)", cmd_gates),
    ("score", "tool: score a formula (or a raw model answer) with the verifier's 12 channels", cmd_score),
    ("eval", "tool: parse and evaluate one formula on a panel", cmd_eval),
    ("alpha101", "tool: Kakushadze's 101 alphas: paper text, parse status, canonical form", cmd_alpha101),
    ("compare-facts", "tool: simulator's stylized facts next to a real CSV folder's", cmd_compare_facts),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="alphagym", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    subs = {}
    for name, help_text, fn in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        _add_common(p)
        p.set_defaults(func=fn)
        subs[name] = p
    subs["calibrate"].add_argument("--from", dest="from_dir", required=True, help="folder of per-ticker CSVs")
    subs["calibrate"].add_argument("--out", help="write the params block to this file")
    subs["dag"].add_argument("--write-dvc", metavar="PATH", help="render dvc.yaml to PATH")
    subs["stylized"].add_argument("panel", help="panel parquet file")
    subs["compare-facts"].add_argument("--from", dest="from_dir", required=True, help="folder of per-ticker CSVs")
    subs["compare-facts"].add_argument("--plot", help="also write a figure (PNG) of the comparison")
    subs["eval"].add_argument("formula", help="formula text, e.g. 'rank(ts_mean(close, 5))'")
    subs["eval"].add_argument("--panel", help="panel parquet (default: results/panel/train.parquet)")
    subs["eval"].add_argument("--json", action="store_true", help="print JSON")
    subs["eval"].add_argument("--out", help="write the evaluated (days x stocks) values to this parquet file")
    subs["score"].add_argument("formula", nargs="?", help="formula text")
    subs["score"].add_argument("--answer", help="a raw model answer (tags, reasoning block and all)")
    subs["score"].add_argument("--window", choices=("train", "holdout"), default="train")
    subs["score"].add_argument("--json", action="store_true", help="print JSON (valid, reason, channels, metrics)")
    subs["score"].add_argument("--plot", help="write a figure of the book (cumulative P&L, turnover, IC) to PNG")
    subs["gates"].add_argument("report", nargs="?", help="gates.json (default: results/world_model/gates.json)")
    subs["alpha101"].add_argument("--panel", help="panel for coverage (default: the train panel if built)")
    subs["alpha101"].add_argument("--json", action="store_true", help="print JSON")
    for extra in EXTRA_COMMANDS:
        extra(sub, _add_common)
    return parser


# Later areas register their subcommands here (each a function adding parsers to `sub`).
EXTRA_COMMANDS: list[Callable[[Any, Callable[[argparse.ArgumentParser], None]], None]] = []


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except AlphagymError as exc:
        print(f"alphagym {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:          # output piped into `head` and closed early: not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
