"""`alphagym`: one subcommand per stage of the stage table, plus tools.

Every subcommand reads params.yaml (`--params`) and accepts `--set key.sub=value` overrides; stages log to
MLflow. Errors the user can fix (bad data, bad formula, bad parameter) print one clear line and exit 2.
This module only parses arguments and prints; the work happens in the areas.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from alphagym.errors import AlphagymError, ConfigError
from alphagym.params import Priorities


def _params(args: argparse.Namespace) -> Any:
    from alphagym.config import load_params

    return load_params(args.params, args.set)


# --- stages -----------------------------------------------------------------------------------------------

def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)        # unwinds: the MLflow run ends KILLED, staged outputs are removed


def _exit_again(args: Any) -> None:
    """`sys.unraisablehook` of a stage process: the exit `_exit_on_signal` raised inside a callback that cannot
    propagate it (a garbage-collection callback of SQLAlchemy's, while MLflow opens its store) is dropped by
    Python, and the stage would run on to the end. The signal is sent again a moment later from another
    thread instead, so its handler runs once the callback has returned, in the main flow, and the stage stops
    (its run KILLED, no outputs); raised at once, it would run inside this hook and be dropped too."""
    import signal
    import threading

    code = args.exc_value.code if isinstance(args.exc_value, SystemExit) else None
    if code in (128 + signal.SIGTERM, 128 + signal.SIGHUP):
        threading.Timer(0.01, os.kill, (os.getpid(), code - 128)).start()
        return
    sys.__unraisablehook__(args)


def _stop_on_signals() -> None:
    """SIGTERM and SIGHUP end a stage as Ctrl-C does (`_exit_on_signal`), wherever the signal lands."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    sys.unraisablehook = _exit_again


def cmd_stage(args: argparse.Namespace) -> int:

    from alphagym.stages import run_stage

    _stop_on_signals()
    key = args.stage if args.family_option is None else f"{args.stage}@{vars(args)[args.family_option]}"
    params = _params(args)
    if os.environ.get("DVC_STAGE") and os.environ.get("DVC_ROOT"):     # run by `dvc repro` / `dvc exp run`
        from alphagym.pipeline import check_rendering

        check_rendering(params, args.params, os.environ["DVC_ROOT"])
    summary = run_stage(params, key)
    print(json.dumps(summary, indent=1, default=str))
    return 0


# --- tools ------------------------------------------------------------------------------------------------

def cmd_dag(args: argparse.Namespace) -> int:
    from alphagym.pipeline import SPECS, dvc_yaml, lock_mismatch, specs_yaml, stage_table, upstream_outputs

    params = _params(args)
    if args.check_lock:
        why = lock_mismatch(params, args.check_lock)
        if why is not None:
            raise ConfigError(why)
        print(f"{args.check_lock} records the outputs of profile {params['profile']!r}")
        return 0
    if args.write_dvc:
        target = Path(args.write_dvc)
        target.write_text(dvc_yaml(params, params_file=args.params))
        specs = target.parent / SPECS       # the params file its stages name, beside it
        specs.parent.mkdir(parents=True, exist_ok=True)
        specs.write_text(specs_yaml())
        print(f"wrote {target} and {specs}")
        return 0
    table = stage_table(params)
    reads = upstream_outputs(table)
    for key, stage in table.items():
        print(f"{key}: {stage.cmd}\n  params: {', '.join(stage.params)}\n  code: {', '.join(stage.code)}\n"
              f"  reads: {sorted(reads[key]) or '-'}\n  writes: {sorted(stage.outs.values())}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from alphagym.data.tools import calibrated_block

    print(calibrated_block(_params(args), args.from_dir, args.out), end="")
    return 0


def cmd_compare_facts(args: argparse.Namespace) -> int:
    from alphagym.data.tools import compare_with_real

    print(compare_with_real(_params(args), args.from_dir, plot=args.plot))
    return 0


def cmd_stylized(args: argparse.Namespace) -> int:
    from alphagym.data.stylized import stylized_facts
    from alphagym.panel import Panel

    print(json.dumps(stylized_facts(Panel.read_parquet(args.panel)), indent=1))
    return 0


def _panel_arg(args: argparse.Namespace, params: Any) -> str | Path:
    """`--panel`, else the train panel the `panel` stage writes."""
    if args.panel:
        return args.panel
    from alphagym.pipeline import stage_table

    return stage_table(params)["panel"].paths("outs")["train"]


def cmd_eval(args: argparse.Namespace) -> int:
    from alphagym.dsl.tools import run_eval

    params = _params(args)
    report = run_eval(params, args.formula, _panel_arg(args, params), args.out)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    con = Console()
    con.print(f"[bold]canonical[/] {report['canonical']}  [dim](windows to the nearest dsl.window_buckets; "
              "evaluated as written)[/]")
    con.print(f"nodes {report['nodes']}  lookback {report['lookback']}  fields {', '.join(report['fields'])}")
    p = report["panel"]
    con.print(f"panel {p['path']}: {p['days']} days x {p['stocks']} stocks, {p['first']} .. {p['last']}")
    table = Table("statistic", "value")
    for k, v in report["values"].items():
        table.add_row(k, f"{v:.6g}" if isinstance(v, float) else str(v))
    con.print(table)
    for note in report["notes"]:
        con.print(f"[yellow]note[/] {note}")
    return 0


def cmd_alpha101(args: argparse.Namespace) -> int:
    from alphagym.dsl.tools import run_alpha101

    params = _params(args)
    rows = run_alpha101(params, _panel_arg(args, params))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("#", "status", "lookback", "coverage", "canonical form, or reason (and caveat)", show_lines=False)
    for r in rows:
        status = "ok" if r["usable"] else ("unusable" if r["parses"] else "no parse")
        cov = f"{r['coverage']:.1%}" if "coverage" in r else "-"
        text = r["canonical"] if r["usable"] else r["reason"]
        if r["caveat"]:
            status += " (caveat)"
            text += f"\n[yellow]caveat:[/] {r['caveat']}"
        table.add_row(str(r["number"]), status, str(r.get("lookback", "-")), cov, text)
    Console(width=200).print(table)
    n_parse = sum(r["parses"] for r in rows)
    n_use = sum(r["usable"] for r in rows)
    print(f"{n_parse} of {len(rows)} parse verbatim from the paper's text; {n_use} usable on this panel")
    return 0


def cmd_gates(args: argparse.Namespace) -> int:
    from alphagym.pipeline import stage_table
    from alphagym.worldmodel.stage import gates_markdown

    path = Path(args.report) if args.report else stage_table(_params(args))["world_model"].paths("outs")["gates"]
    if not path.is_file():
        raise AlphagymError(f"no gate report at {path}: run `alphagym world-model` first")
    from alphagym.artifacts import read_json

    print(gates_markdown(read_json(path, what="gate report")))
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    if (args.formula is None) == (args.answer is None):
        raise ConfigError("give either a FORMULA or --answer TEXT")
    params = _params(args)
    text, answer = (args.answer, True) if args.answer is not None else (args.formula, False)
    served = None if (args.plot or args.no_server) else _score_on_server(args, text, answer)
    if served is not None:
        out, note = served["card"], served["note"]
        shown = f"scored by `alphagym serve` (pid {served['pid']})"
    else:
        from alphagym.pipeline import verifier_inputs
        from alphagym.verifier.loading import load_verifier

        verifier, note = load_verifier(params, args.window, verifier_inputs(params, args.window))
        card = verifier.score(text, answer=answer)
        if args.plot and card.valid:
            from alphagym.verifier.plots import book_figure

            note = (note + "; " if note else "") + f"figure: {book_figure(card, verifier, args.plot)}"
        out, shown = card.to_json(), args.server_note
        if served is None and args.server_note is None and not (args.plot or args.no_server) \
                and os.environ.get(AUTOSERVE_ENV, "1") != "0":
            shown = _start_server(args)
    # an invalid FORMULA is the user's to fix (exit 2, after its card); an invalid raw answer is a score
    code = 2 if not (answer or out["valid"]) else 0
    if args.json:                          # stdout stays the card alone, wherever it was scored
        if note:
            out["note"] = note
        if shown:
            print(f"alphagym score: note: {shown}", file=sys.stderr)
        print(json.dumps(out, indent=1))
        return code
    _print_card(out, text, params.verifier.priorities, "; ".join(n for n in (note, shown) if n))
    return code


def cmd_propose(args: argparse.Namespace) -> int:
    from alphagym.briefs.catalogue import load_catalogue
    from alphagym.pipeline import stage_table, verifier_inputs
    from alphagym.propose.front import (
        FIELDS,
        MAX_K,
        brief_from_fields,
        brief_from_text,
        policy_folder,
        read_brief_file,
    )

    params = _params(args)
    cat = load_catalogue()
    fields = {f: vars(args)[f] for f in FIELDS if vars(args)[f] is not None}
    given = [bool(args.brief is not None), bool(fields), bool(args.briefs)]
    if sum(given) != 1:
        raise ConfigError("give one of: a BRIEF text, catalogue fields (--mechanism, --horizon, --input-rule, "
                          "--structure, --forbidden, [--risk]), or --briefs FILE")
    if args.k < 1 or args.n < 1:
        raise ConfigError(f"-k and -n must be at least 1 (got -k {args.k}, -n {args.n})")
    if args.k > MAX_K:
        raise ConfigError(f"-k is at most {MAX_K} answers a brief (got -k {args.k})")
    if not args.temperature >= 0:
        raise ConfigError(f"--temperature must be 0 (greedy) or above (got {args.temperature:g})")
    briefs = (read_brief_file(Path(args.briefs), cat) if args.briefs
              else [brief_from_fields(cat, fields)] if fields else [brief_from_text(cat, args.brief)])
    table = stage_table(params)
    shipped, sft = Path(table["report"].outs["adapter"]), Path(table[f"sft@{params.rl.policy}"].outs["policy"])
    checkpoint = Path(args.checkpoint) if args.checkpoint else None
    policy_folder(shipped, sft, checkpoint)          # a missing policy is named before the model libraries load
    # the policy and the verifier import torch and transformers (seconds): only once the input is known good
    from transformers.utils import logging as hf_logging

    from alphagym.propose.propose import load_proposer, propose
    from alphagym.verifier.loading import load_verifier

    # transformers draws a "Loading weights" bar on stderr: noise around the table, so off while loading
    # (and back as it was after: a setting of the command, not of the process)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        policy, source = load_proposer(params, shipped, sft, checkpoint)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    import torch

    torch.set_num_threads(params.policy.threads)
    verifier, note = load_verifier(params, "train", verifier_inputs(params, "train"))
    out = propose(params, policy, briefs, verifier, k=args.k, n=args.n, temperature=args.temperature,
                  seed=params.seed if args.seed is None else args.seed, book=args.book, note=note)
    out["policy"] = source
    if args.json:
        print(json.dumps(out, indent=1, default=float))
        return 0
    _print_proposals(out)
    return 0


def _print_proposals(out: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    # a terminal's own width; piped (a file, a pager), rich would wrap at 80 columns and split the formulas
    con = Console(width=None if sys.stdout.isatty() else 200)
    con.print(f"[dim]policy {out['policy']}; {out['k']} answers a brief at temperature {out['temperature']:g}, "
              f"seed {out['seed']}; scored on the train window[/]")
    if out.get("note"):
        con.print(f"[yellow]note[/] {out['note']}")
    for b in out["briefs"]:
        f = b.get("fields")
        shown = " · ".join(f"{k} {v}" for k, v in f.items() if k != "risk") if f else b["brief"]
        con.print(f"\n[bold]brief[/] {shown}")
        line = f"decoding: {b['constrained']}; {b['valid']} of {b['answers']} valid, {b['distinct']} distinct"
        if b.get("compliant_share") is not None:
            line += f"; compliant {b['compliant_share']:.2f} of the valid"
        con.print(line)
        if b.get("invalid"):
            con.print("invalid: " + ", ".join(f"{k} {v}" for k, v in b["invalid"].items())
                      + (f"; e.g. {b['invalid_example']}" if not b["valid"] else ""))
        if b.get("note"):
            con.print(f"[yellow]note[/] {b['note']}")
        # the mechanism fidelity, and whether it reaches the pass mark of `compliance_idea` (`briefs.idea`)
        t = Table("#", "train CPCV", "Sharpe", "turnover", "beta", "n", "checks", f"idea (≥{out['idea_tau']:.2f})",
                  "formula")
        t.columns[-1].overflow = "fold"
        for i, r in enumerate(b["proposals"], 1):
            failed = [c for c, ok in r["checks"].items() if not ok]
            checks = "-" if not r["checks"] else f"fails {', '.join(failed)}" if failed else f"all {len(r['checks'])}"
            t.add_row(str(i), f"{r['train_cpcv']:+.3f}", f"{r['train_sharpe_net']:+.2f}", f"{r['turnover']:.2f}",
                      f"{r['beta']:+.2f}", str(r["count"]), checks,
                      f"{r['idea_fidelity']:.2f}{' on' if r['on_mechanism'] else ''}" if "idea_fidelity" in r else "-",
                      r["written"])
        con.print(t)
    if "book" in out:
        bk = out["book"]
        if not bk or not bk.get("members"):
            con.print("\n[bold]book[/] none" + (f": {bk['note']}" if bk else ": no valid answer"))
        else:
            con.print(f"\n[bold]book[/] (correlation-capped, chosen and measured on the train window): "
                      f"{len(bk['members'])} formulas, Sharpe {bk['sharpe']:.2f}, beta {bk['beta']:+.2f}, "
                      f"effective bets {bk['effective_bets']:.1f}, mean pairwise corr {bk['mean_pairwise_corr']:.2f}")


AUTOSERVE_ENV = "ALPHAGYM_SCORE_AUTOSERVE"    # "0": `alphagym score` never starts a server by itself
AUTOSERVE_IDLE_S = 900.0


def _start_server(args: argparse.Namespace) -> str:
    """Start `alphagym serve` for this folder in the background (its own session, so it outlives this
    command and a Ctrl-C in the shell; it stops after AUTOSERVE_IDLE_S idle) with this command's params and
    window preloaded: a fresh process pays pandas, numba and the verifier's set-up every time (BENCHMARKS.md),
    the next `alphagym score` asks the warm server instead. Returns the note to show."""
    import subprocess

    from alphagym.verifier.server import socket_path

    log = socket_path().with_suffix(".log")
    cmd = [sys.executable, "-m", "alphagym.cli", "serve", "--idle-timeout", f"{AUTOSERVE_IDLE_S:g}",
           "--warm", args.window, "--params", args.params, *(x for kv in args.set for x in ("--set", kv))]
    try:
        log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(log, "ab") as fh:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh, start_new_session=True)
    except OSError as exc:               # the card is scored already: say why no server, do not fail
        return f"scored in this process; could not start `alphagym serve` ({exc})"
    return (f"scored in this process; started `alphagym serve` (pid {proc.pid}, log {log}) to answer the next "
            f"calls, until {AUTOSERVE_IDLE_S / 60:g} min idle ({AUTOSERVE_ENV}=0 or --no-server: never)")


def _score_on_server(args: argparse.Namespace, text: str, answer: bool) -> dict[str, Any] | None:
    """The warm `alphagym serve` of this folder's card, or None (no server, or it refused: then
    `args.server_note` says why, and the card is scored here)."""
    from alphagym.verifier.server import request

    reply = request(text, answer, args.window, args.params, args.set)
    if reply is None:
        return None
    if "error" in reply:
        raise AlphagymError(reply["error"])
    if "refused" in reply:
        args.server_note = f"scored in this process: {reply['refused']}"
        return None
    return reply


def cmd_serve(args: argparse.Namespace) -> int:

    from alphagym.pipeline import verifier_inputs
    from alphagym.verifier.server import ScoreServer, socket_path

    _params(args)                          # a broken params.yaml fails here, not at the first request
    _stop_on_signals()
    server = ScoreServer(socket_path(), verifier_inputs, idle_timeout=args.idle_timeout,
                         log=lambda line: print(f"alphagym serve: {line}", file=sys.stderr, flush=True))
    server.bind()
    print(f"alphagym serve: pid {os.getpid()} listening at {server.path} for {server.identity['cwd']} "
          f"(stops after {args.idle_timeout:g} s idle, or Ctrl-C)", file=sys.stderr, flush=True)
    try:
        if args.warm:                        # a request arriving meanwhile waits in the socket's backlog
            server.warm(str(Path(args.params).resolve()), list(args.set), args.warm)
        server.serve_forever()               # removes its socket however it ends
    except KeyboardInterrupt:
        pass
    return 0


def _print_card(card: dict[str, Any], text: str, priorities: Priorities, note: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    if note:
        con.print(f"[yellow]note[/] {note}")
    status = "[green]valid[/]" if card["valid"] else f"[red]invalid[/] ({card['error_type']}): {card['reason']}"
    con.print(f"[bold]{card['formula'] or text}[/]  {status}")
    if card["canonical"]:
        # the canonical form buckets windows (20 -> 21): say so, or it reads as if the formula were changed
        con.print(f"canonical {card['canonical']}  [dim](windows to the nearest dsl.window_buckets; the key "
                  "for duplicates and novelty, not what was scored)[/]")
    t = Table("channel", "priority", "raw value", "note")
    for k, v in card["channels"].items():
        t.add_row(k, f"{priorities[k]:g}", f"{v:+.4f}", card["skipped"].get(k, ""))
    con.print(t)
    if card["metrics"]:
        m = Table("metric", "value")
        for k, v in card["metrics"].items():
            m.add_row(k, f"{v:.6g}" if isinstance(v, float) else str(v))
        con.print(m)


# --- parser -----------------------------------------------------------------------------------------------

class _ArgumentParser(argparse.ArgumentParser):
    """Reads an argument that starts with one '-' and is not an option of the command as an argument: many
    Alpha101 formulas start with '-' (`alphagym score '-rank(close)'`), and every option here but -h is
    long (`--json`), so such a string can only be a formula (or an option's value: `--answer -x`)."""

    def _parse_optional(self, arg_string: str) -> Any:
        if arg_string[:1] == "-" and arg_string[1:2] not in ("", "-") \
                and arg_string not in self._option_string_actions:
            return None
        return super()._parse_optional(arg_string)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default="params.yaml", help="parameters file (default: params.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a parameter, e.g. --set data.source=csv (repeatable)")


EPILOGS = {
    "score": "Exit status: 0 when the formula is valid; the command exits 2 when the formula is invalid (its card, "
             "with the reason, is printed first) and on a user error (a bad parameter, no panel). A raw answer "
             "(--answer) is scored whatever it holds: an invalid one is a score (its penalties), exit 0. A formula "
             "may start with '-' (alphagym score '-rank(close)').",
}

TOOLS: list[tuple[str, str, Callable[[argparse.Namespace], int]]] = [
    ("dag", "show the stage table, or write dvc.yaml from it", cmd_dag),
    ("calibrate", "fit the simulator to a folder of real per-ticker CSV files", cmd_calibrate),
    ("compare-facts", "simulator's stylized facts next to a real CSV folder's", cmd_compare_facts),
    ("stylized", "stylized facts of a panel file", cmd_stylized),
    ("eval", "parse and evaluate one formula on a panel", cmd_eval),
    ("alpha101", "Kakushadze's 101 alphas: paper text, parse status, canonical form", cmd_alpha101),
    ("gates", "the world-model gate report as markdown tables (as in the README)", cmd_gates),
    ("score", f"score a formula (or a raw model answer) with the verifier's {len(Priorities.model_fields)} channels",
     cmd_score),
    ("serve", "keep a warm scoring process that answers `alphagym score` in this folder", cmd_serve),
    ("propose", "answer a brief with the trained policy (k samples under the brief's constraints), scored on the "
                "train window", cmd_propose),
]


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="alphagym", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    from alphagym.pipeline import table_rows

    for row in table_rows():
        text = "stage: " + (row.help or row.name)
        p = sub.add_parser(row.command, help=text, description=text)
        _add_common(p)
        p.set_defaults(func=cmd_stage, stage=row.name, family_option=None)
        if row.family is not None:
            p.add_argument(f"--{row.family.wildcard}", required=True, help=f"which item of {row.family.key}")
            p.set_defaults(family_option=row.family.wildcard)
    subs = {}
    for name, help_text, fn in TOOLS:
        p = sub.add_parser(name, help="tool: " + help_text, description=help_text, epilog=EPILOGS.get(name))
        _add_common(p)
        p.set_defaults(func=fn)
        subs[name] = p
    subs["calibrate"].add_argument("--from", dest="from_dir", required=True, help="folder of per-ticker CSVs")
    subs["calibrate"].add_argument("--out", help="write the params block to this file")
    subs["dag"].add_argument("--check-lock", metavar="LOCK",
                             help="refuse, in one line, a dvc.lock that records another profile's outputs than "
                                  "this one's (`make pull` runs it first)")
    subs["dag"].add_argument("--write-dvc", metavar="PATH",
                             help="render dvc.yaml to PATH, and the stage specs it names (workflow/stage_specs.yaml "
                                  "beside it)")
    subs["stylized"].add_argument("panel", help="panel parquet file")
    subs["compare-facts"].add_argument("--from", dest="from_dir", required=True, help="folder of per-ticker CSVs")
    subs["compare-facts"].add_argument("--plot", help="also write a figure (PNG) of the comparison")
    subs["eval"].add_argument("formula", help="formula text, e.g. 'rank(ts_mean(close, 5))'")
    subs["eval"].add_argument("--panel", help="panel parquet (default: the train panel the `panel` stage writes)")
    subs["eval"].add_argument("--json", action="store_true", help="print JSON")
    subs["eval"].add_argument("--out", help="write the evaluated (days x stocks) values to this parquet file")
    subs["score"].add_argument("formula", nargs="?", help="formula text")
    subs["score"].add_argument("--answer", help="a raw model answer (tags, reasoning block and all)")
    subs["score"].add_argument("--window", choices=("train", "holdout"), default="train")
    subs["score"].add_argument("--json", action="store_true", help="print JSON (valid, reason, channels, metrics)")
    subs["score"].add_argument("--plot", help="write a figure of the book (cumulative P&L, turnover, IC) to PNG")
    subs["score"].add_argument("--no-server", action="store_true",
                               help="score in this process even when `alphagym serve` runs for this folder, "
                                    "and start none")
    subs["score"].set_defaults(server_note=None)         # why a running server did not answer, if it did not
    subs["serve"].add_argument("--idle-timeout", type=float, default=3600.0, metavar="S",
                               help="stop after S seconds without a request (default 3600)")
    subs["serve"].add_argument("--warm", choices=("train", "holdout"),
                               help="load the verifier of this window (and --params/--set) before the first request")
    pp = subs["propose"]
    pp.add_argument("brief", nargs="?", help="the brief's text (a catalogue brief's text keeps its checks; other "
                                             "text runs under the grammar alone)")
    pp.add_argument("-k", type=int, default=16, help="answers sampled per brief (default 16)")
    pp.add_argument("-n", type=int, default=5, help="best distinct formulas shown per brief (default 5)")
    pp.add_argument("--mechanism", help="catalogue mechanism id, e.g. reversal (a brief from catalogue fields needs "
                                        "--mechanism, --horizon, --input-rule, --structure and --forbidden)")
    pp.add_argument("--horizon", type=int, help="target horizon in days, e.g. 21")
    pp.add_argument("--input-rule", "--inputs", dest="input_rule", help="catalogue input rule id, e.g. price_only")
    pp.add_argument("--structure", help="catalogue structure id, e.g. ranked")
    pp.add_argument("--forbidden", help="catalogue constraint id, e.g. no_argext")
    pp.add_argument("--risk", help="catalogue risk id: it changes the brief's wording only, no check reads it "
                                    "(default: the catalogue's first)")
    pp.add_argument("--briefs", metavar="FILE", help="answer a file of briefs: one a line, text or JSON (a brief "
                                                     "record, or catalogue fields)")
    pp.add_argument("--checkpoint", metavar="DIR", help="an RL checkpoint or a saved policy folder (default: the "
                                                        "shipped adapter the report stage wrote, or the SFT policy "
                                                        "when the report shipped step 0)")
    pp.add_argument("--temperature", type=float, default=1.0,
                    help="sampling temperature (default 1.0; 0: greedy, the same answer k times)")
    pp.add_argument("--seed", type=int, help="sampling seed (default: params' seed)")
    pp.add_argument("--book", action="store_true", help="add the correlation-capped book over all valid answers, "
                                                        "chosen and measured on the train window")
    pp.add_argument("--json", action="store_true", help="print JSON")
    subs["gates"].add_argument("report", nargs="?", help="gates.json (default: the world_model stage's)")
    subs["alpha101"].add_argument("--panel", help="panel for coverage (default: the train panel if built)")
    subs["alpha101"].add_argument("--json", action="store_true", help="print JSON")
    return parser


def _quiet_optional_kernels() -> None:
    """bitsandbytes, imported by peft, looks for an optional CPU kernel on the Hugging Face kernel hub (the
    `kernels` package, not a dependency; no hub is reached here) and logs a warning on every run when it is
    absent. Its built-in CPU path is what runs either way, so the line is noise in every `train` log."""
    import logging

    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    from alphagym.runtime import configure_runtime

    configure_runtime()                  # before anything imports numpy, numba or torch
    args = build_parser().parse_args(argv)
    _quiet_optional_kernels()
    try:
        return int(args.func(args))
    except AlphagymError as exc:
        print(f"alphagym {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:        # Ctrl-C: the stage runner has unwound (staging removed, MLflow run ended)
        again = "; rerun the same command to resume" if args.func is cmd_stage else ""
        print(f"alphagym {args.command}: interrupted{again}", file=sys.stderr)
        return 130                   # 128 + SIGINT, as a shell reports an interrupted command
    except BrokenPipeError:          # output piped into `head` and closed early: not an error
        sys.stderr.close()
        return 0
    except OSError as exc:           # the system refused a file (read-only, no permission, disk full): the
        if exc.errno not in _REFUSED:  # user's to fix, so one line; any other OSError is a bug: its traceback
            raise
        where = f": {exc.filename}" if exc.filename else ""
        print(f"alphagym {args.command}: error: {exc.strerror}{where}", file=sys.stderr)
        return 2


_REFUSED = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT}


if __name__ == "__main__":
    sys.exit(main())
