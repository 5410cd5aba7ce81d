"""The `archive` stage (seed the novelty archive with the Alpha101 books) and the `score` command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from alphagym.config import results_dir
from alphagym.panel import Panel
from alphagym.dsl.alpha101 import alpha101
from alphagym.dsl.evaluate import DSL_FIELDS
from alphagym.dsl.parser import Limits
from alphagym.tracking import stage_run
from alphagym.verifier.archive import NoveltyArchive
from alphagym.verifier.verifier import ScoreCard, Verifier


def archive_path(params: dict[str, Any]) -> Path:
    return results_dir(params) / "verifier" / "archive.npz"


def panel_path(params: dict[str, Any], window: str) -> Path:
    return results_dir(params) / "panel" / f"{window}.parquet"


def seed_archive(verifier: Verifier, params: dict[str, Any], progress: bool = True) -> dict[str, int]:
    """Add every usable Alpha101 book that trades (valid under the verifier's rules or not) to the archive."""
    from tqdm import tqdm

    alphas = [a for a in alpha101(Limits.from_params(params["dsl"]["limits"]), frozenset(DSL_FIELDS)) if a.usable]
    added = 0
    for a in tqdm(alphas, desc="seeding novelty archive", disable=not progress, unit="alpha"):
        book = verifier.book(verifier.evaluator.evaluate(a.ast))
        before = len(verifier.archive)
        verifier.archive.add(book.net[verifier.rows], a.canonical, f"alpha101#{a.number}")
        added += len(verifier.archive) > before
    return {"alphas": len(alphas), "added": added}


def run_archive(params: dict[str, Any]) -> Path:
    with stage_run("archive", params) as run:
        verifier = Verifier(Panel.read_parquet(panel_path(params, "train")), params)
        stats = seed_archive(verifier, params)
        out = archive_path(params)
        verifier.archive.save(out)
        run.log_metrics({"archive_rows": len(verifier.archive), **stats})
    return out


def load_verifier(params: dict[str, Any], window: str) -> tuple[Verifier, str | None]:
    """A verifier on the train or holdout panel; the train one loads the archive (or seeds it in memory)."""
    panel = Panel.read_parquet(panel_path(params, window))
    if window == "holdout":
        return Verifier(panel, params, window="holdout"), None
    worlds = {}
    if params["verifier"]["jepa_stress"]["enabled"]:
        from alphagym.verifier.stress import load_kept_worlds

        root = results_dir(params) / "world_model"
        worlds = load_kept_worlds(root / "gates.json", root / "worlds")
    path = archive_path(params)
    if path.is_file():
        return Verifier(panel, params, NoveltyArchive.load(path), stress_worlds=worlds), None
    verifier = Verifier(panel, params, stress_worlds=worlds)
    seed_archive(verifier, params, progress=False)
    return verifier, f"{path} not found: seeded the novelty archive with Alpha101 in memory (run `alphagym archive`)"


def print_card(card: ScoreCard, priorities: dict[str, float], note: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    if note:
        con.print(f"[yellow]note[/] {note}")
    status = "[green]valid[/]" if card.valid else f"[red]invalid[/] ({card.error_type}): {card.reason}"
    con.print(f"[bold]{card.formula or card.text}[/]  {status}")
    if card.canonical:
        con.print(f"canonical {card.canonical}")
    t = Table("channel", "priority", "raw value", "note")
    for k, v in card.channels.items():
        t.add_row(k, f"{priorities[k]:g}", f"{v:+.4f}", card.skipped.get(k, ""))
    con.print(t)
    if card.metrics:
        m = Table("metric", "value")
        for k, v in card.metrics.items():
            m.add_row(k, f"{v:.6g}" if isinstance(v, float) else str(v))
        con.print(m)


def card_json(card: ScoreCard, note: str | None) -> str:
    out = card.to_json()
    if note:
        out["note"] = note
    return json.dumps(out, indent=1)
