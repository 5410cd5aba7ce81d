"""What the trainer scores answers with: an environment maps one group of answers to one brief to scored
answers (validity, reward channels, core score, canonical form) and is told which answers were kept.

`VerifierEnv` is the real one (the 12-channel verifier, brief compliance, the novelty archive). Tests use
small scripted environments with the same two methods.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from alphagym.artifacts import read_json, read_npz
from alphagym.briefs.catalogue import Catalogue
from alphagym.briefs.compliance import BriefChecker
from alphagym.briefs.idea import IdeaCheck
from alphagym.errors import ArtifactError
from alphagym.verifier import channels as ch
from alphagym.verifier.archive import MarginalBook, NoveltyArchive, standardise
from alphagym.verifier.verifier import ScoreCard, Verifier

WRITTEN = "written.json"     # formula -> its train CPCV and turnover, every valid one the rung wrote
RECENT = "recent_families.json"   # R13's memory: the families of the last steps' valid answers
MARGINAL = "marginal_book.npz"   # R16's running book (`verifier.archive.MarginalBook`)
BETS = "recent_bets.npz"     # and each of those families' standardised train P&L (`crowding.same_bet_corr`)


@dataclass
class Scored:
    valid: bool
    channels: dict[str, float]
    core: float                       # the score the advantage floor reads: the answer's train CPCV (R1)
    canonical: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    card: ScoreCard | None = None     # the verifier's card, when there is one
    family: str | None = None         # R13's family (set with the step's channels; None: the canonical form)


class Environment(Protocol):
    priorities: Mapping[str, float]

    def score(self, answers: Sequence[str], brief: Mapping[str, Any]) -> list[Scored]: ...

    def commit(self, scored: Sequence[Scored]) -> None: ...

    def save(self, folder: Path) -> None: ...

    def load(self, folder: Path) -> None: ...


def bet_families(canonicals: Sequence[str | None], pnls: Sequence[np.ndarray | None], known: dict[str, np.ndarray],
                 same_bet_corr: float | None) -> list[str | None]:
    """R13's family of each answer: its canonical form, unless its train P&L has |corr| >= `same_bet_corr` with
    the P&L of a family in `known` (family -> standardised P&L: mean 0, unit norm), whose name it then takes.
    Families are not bets: `rank(ts_delta(log(close), 3))` and a smoothed slope of the same returns are two
    canonical forms and one book. An answer that matches no family adds its own to `known` (updated in place),
    so later answers of the same step match it too. None (an invalid answer) stays None; `same_bet_corr` None
    keeps canonical forms. Two answers whose books correlate 0.97 are one family; at 0.5, two."""
    out: list[str | None] = []
    names = list(known)
    # the window's families stacked once per call; this call's new ones (a few) kept apart, so a new family
    # does not copy the whole window's matrix
    rows = np.stack([known[n] for n in names]) if names else np.zeros((0, 0))
    fresh: list[np.ndarray] = []
    for canon, pnl in zip(canonicals, pnls, strict=True):
        z = None if canon is None or same_bet_corr is None or pnl is None or canon in known else standardise(pnl)
        if z is None:
            out.append(canon)
            continue
        corr = np.abs(np.concatenate([rows @ z if len(rows) else np.zeros(0), np.array([f @ z for f in fresh])]))
        if len(corr) and corr.max() >= same_bet_corr:
            out.append(names[int(np.argmax(corr))])
            continue
        known[canon] = z
        names.append(canon)
        fresh.append(z)
        out.append(canon)
    return out


class VerifierEnv:
    """The train-window verifier as an environment. The core score is R1 (CPCV of the net P&L, or the
    invalid answer's R1 score): the channel that says whether the book makes money after costs, which the
    advantage floor compares against. `commit` adds the valid answers to the novelty archive, after the
    whole step is scored (so every group of a step sees the same archive)."""

    def __init__(self, verifier: Verifier, catalogue: Catalogue, tolerance: float, cache: int = 0,
                 reward_weights: Mapping[str, float] | None = None, idea: IdeaCheck | None = None) -> None:
        self.verifier, self.catalogue, self.tolerance = verifier, catalogue, tolerance
        self.idea = idea                  # R15's mechanism fidelity, on the verifier's (train) panel
        cfg = verifier.cfg
        # the verifier's priorities, with the recipe's reward_weights (a reward rung's change) over them
        self.priorities = {**dict(cfg.priorities), **dict(reward_weights or {})}
        if cache:
            verifier.enable_cache(cache)
        self._counted = (verifier.cache_lookups, verifier.cache_hits)
        # every distinct valid formula the rung has written, with its train numbers: the archive book's pool
        self.written: dict[str, dict[str, float]] = {}
        # the families of each recent step's valid answers, newest last (R13's memory), and their P&L
        self.recent: deque[dict[str, int]] = deque(maxlen=cfg.crowding.window)
        self.bets: dict[str, np.ndarray] = {}
        # R16's running book of the policy's own paying answers, before the step being scored
        self.book = MarginalBook(verifier.archive.length, cfg.marginal.size, cfg.marginal.max_corr)

    def score(self, answers: Sequence[str], brief: Mapping[str, Any]) -> list[Scored]:
        checker = BriefChecker(brief, self.catalogue, self.tolerance, idea=self.idea)
        cards = self.verifier.score_group(list(answers), answer=True, brief=checker)
        return [Scored(c.valid, dict(c.channels), float(c.channels["cpcv"]), c.canonical,
                       {k: v for k, v in c.metrics.items() if isinstance(v, float)}, c) for c in cards]

    def step_metrics(self) -> dict[str, float]:
        """The card cache's hits over lookups since the last call (one step's scoring, refills included)."""
        v = self.verifier
        lookups, hits = v.cache_lookups - self._counted[0], v.cache_hits - self._counted[1]
        self._counted = (v.cache_lookups, v.cache_hits)
        return {"verifier/cache_hit_rate": hits / lookups if lookups else 0.0}

    def step_channels(self, scored: Sequence[Sequence[Scored]]) -> None:
        """The channels that need the whole step (R13 `crowding`, R16 `marginal`), set on every answer of the
        step's groups before advantages are computed; the recent steps, and R16's book, are those committed
        before this one."""
        recent: Counter[str] = Counter()
        for c in self.recent:
            recent.update(c)
        cfg = self.verifier.cfg.crowding
        flat = [s for g in scored for s in g]
        fams = bet_families([s.canonical if s.valid else None for s in flat],
                               [s.card.pnl if s.card is not None else None for s in flat], self.bets,
                               cfg.same_bet_corr)
        for s, f in zip(flat, fams, strict=True):
            s.family = f
        eligible = None
        if cfg.max_factor_r2 is not None:
            cap = cfg.max_factor_r2
            # NaN (no factor regression) fails the comparison: not shown to be a bet of its own
            eligible = [[s.valid and s.core > 0 and s.metrics.get("factor_r2", float("nan")) <= cap for s in g]
                        for g in scored]
        values = ch.crowding([[s.family for s in g] for g in scored], recent, cfg, eligible)
        for g, row in zip(scored, values, strict=True):
            for s, v in zip(g, row, strict=True):
                s.channels["crowding"] = v
        mcfg, cpcv_of = self.verifier.cfg.marginal, self.verifier.scorer.cpcv_of_net
        for s in flat:
            pnl = s.card.pnl if s.card is not None else None
            s.channels["marginal"] = ch.marginal(pnl, self.book.rows, float(s.core), s.valid, cpcv_of, mcfg)

    def commit(self, scored: Sequence[Scored]) -> None:
        self.recent.append(dict(Counter(s.family or s.canonical for s in scored if s.valid and s.canonical)))
        alive = {f for step in self.recent for f in step}
        self.bets = {f: z for f, z in self.bets.items() if f in alive}     # only families R13 still counts
        # R16's book takes the step's paying answers best first
        for s in sorted(scored, key=lambda s: -float(s.core)):           # the core score is R1, the CPCV
            if s.valid and s.card is not None and s.card.pnl is not None and s.canonical:
                self.book.offer(s.card.pnl, float(s.core), s.canonical)
        for s in scored:
            if s.valid and s.card is not None and s.card.pnl is not None and s.canonical:
                self.verifier.archive.add(s.card.pnl, s.canonical, "rl")
                if s.card.formula and s.card.formula not in self.written:
                    self.written[s.card.formula] = {"train_cpcv": float(s.channels["cpcv"]),
                                                    "train_turnover": float(s.metrics.get("turnover", 0.0))}

    def save(self, folder: Path) -> None:
        """The novelty archive is training state: a resumed run must see the archive the killed one had; the
        formulas written so far are what the archive book chooses from (`books.stage`)."""
        self.verifier.archive.save(folder / "archive.npz")
        self.book.save(folder / MARGINAL)
        (folder / WRITTEN).write_text(json.dumps(self.written, indent=0, sort_keys=True))
        (folder / RECENT).write_text(json.dumps({"steps": list(self.recent)}))
        names = sorted(self.bets)
        np.savez(folder / BETS, names=np.array(names, dtype=str),
                 pnl=np.stack([self.bets[n] for n in names]) if names else np.zeros((0, self.verifier.archive.length)))

    def load(self, folder: Path) -> None:
        """The checkpoint's archive (an ArtifactError names a missing, cut or garbled file), replacing the
        current one only once it has been read whole and fits this verifier's panel. A checkpoint without the
        record of written formulas or of recent families (one saved before they existed) resumes with empty
        ones."""
        path = folder / "archive.npz"
        archive = NoveltyArchive.load(path)
        if archive.length != self.verifier.archive.length:
            raise ArtifactError(path, f"the archive holds P&L of length {archive.length}, this run's train panel "
                                      f"gives {self.verifier.archive.length}")
        written = read_json(folder / WRITTEN, what="formulas the rung wrote") if (folder / WRITTEN).is_file() else {}
        recent = (read_json(folder / RECENT, keys=("steps",), what="recent steps' families")["steps"]
                  if (folder / RECENT).is_file() else [])
        bets: dict[str, np.ndarray] = {}
        if (folder / BETS).is_file():
            data = read_npz(folder / BETS, keys=("names", "pnl"), what="recent families' P&L")
            bets = {str(n): row for n, row in zip(data["names"], data["pnl"], strict=True)}
        cfg = self.verifier.cfg.marginal
        book = (MarginalBook.load(folder / MARGINAL, archive.length, cfg.size, cfg.max_corr)
                if (folder / MARGINAL).is_file() else MarginalBook(archive.length, cfg.size, cfg.max_corr))
        self.verifier.archive = archive
        self.book = book
        self.written = dict(written)
        self.recent = deque(recent, maxlen=self.recent.maxlen)
        self.bets = bets
