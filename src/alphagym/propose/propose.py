"""Answer a user's briefs with a trained policy, and score the answers on the train window only.

`alphagym propose` is the front door after training: a brief (catalogue fields, a catalogue brief's
text, or free text) goes to the shipped policy (the report stage's `shipped_adapter` on the SFT policy) or
to a checkpoint the user names; `k` answers are sampled under the brief's constraints
(`policy.decoding: brief`: every valid answer passes every hard check of a catalogue brief; free text that
is no catalogue brief runs under the grammar alone, and the result says so); the verifier scores them on
the train panel, and the best `n` distinct formulas by train CPCV are returned with their score cards,
compliance by check and mechanism fidelity (`briefs.idea`). `book` adds the correlation-capped book over
every valid answer, chosen on train numbers (`books.metrics.capped_selection`) and measured on the train
window.

The policy folders and the verifier come from the caller (the CLI resolves them from the stage table):
the areas sit below the table, which only the CLI and the stage dispatcher read.

Nothing here reads the holdout panel: the policy folders, the briefs catalogue and the train-window
verifier inputs (train panel, novelty archive, stress worlds) are all it opens (the end-to-end test,
tests/test_pipeline.py, runs it with the holdout panel removed). The shipped adapter was chosen by the
probe on train CPCV alone.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from alphagym.books.metrics import book_metrics, capped_selection
from alphagym.briefs.catalogue import CHECKS, FIELDS, load_catalogue
from alphagym.briefs.compliance import BriefChecker
from alphagym.briefs.idea import IdeaCheck
from alphagym.dsl.parser import parse
from alphagym.dsl.printer import plain
from alphagym.errors import BriefError, PolicyError
from alphagym.params import Params
from alphagym.policy import META
from alphagym.policy.model import Policy, load_policy, set_decoding
from alphagym.propose.front import policy_folder
from alphagym.rl.checkpoints import at_checkpoint, sft_base
from alphagym.verifier.verifier import Verifier


def load_proposer(params: Params, shipped: Path, sft_folder: Path, checkpoint: Path | None = None
                  ) -> tuple[Policy, str]:
    """The policy that answers, with `policy.decoding` as configured, and where it came from. Default: the
    shipped adapter (`shipped`: the report stage's, chosen on train CPCV) on the SFT policy of `rl.policy`
    (`sft_folder`), or that SFT policy itself when the report shipped step 0. A
    `checkpoint`: an RL checkpoint folder (put on that SFT policy) or a saved policy (an SFT policy). A
    folder that is neither is a PolicyError naming it."""
    tol = params.briefs.horizon_tolerance
    folder = policy_folder(shipped, sft_folder, checkpoint)
    meta_path = folder / META
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        raise PolicyError(f"{meta_path} cannot be read: {exc}") from None
    if isinstance(meta, dict) and "config_hash" in meta:          # an RL checkpoint: an adapter on the SFT policy
        if not sft_folder.is_dir():
            raise PolicyError(f"{folder} is an RL checkpoint on the SFT policy {sft_folder}, which is missing "
                              "(run `alphagym sft`)")
        return at_checkpoint(sft_base(sft_folder, params.policy, params.dsl.limits, tol), folder), str(folder)
    policy = load_policy(folder, params.policy.hf.nf4)
    return set_decoding(policy, params.policy.decoding, params.dsl.limits, tol, params.policy.witness_variants), \
        str(folder)


def _card_row(card: Any, count: int, tau: float) -> dict[str, Any]:
    m = card.metrics
    checks = {c: bool(m[f"compliance/{c}"]) for c in CHECKS if f"compliance/{c}" in m}
    # `written`: the formula as the printer writes its tree (lower case, one spacing; windows as written,
    # unlike `canonical`), what the table shows of an answer the model may have written in mixed case
    row = {"formula": card.formula, "written": plain(parse(card.formula)), "canonical": card.canonical,
           "count": count,
           "train_cpcv": card.channels["cpcv"], "train_sharpe_net": m.get("sharpe_net"),
           "turnover": m.get("turnover"), "beta": m.get("beta"), "ic": m.get("ic"),
           "compliant": bool(m["compliant"]) if "compliant" in m else None, "checks": checks}
    if "idea_fidelity" in m:          # measured by the verifier on the signal it scored (a brief's mechanism)
        row.update(idea_fidelity=m["idea_fidelity"], on_mechanism=m["idea_fidelity"] >= tau)
    return row


def propose(params: Params, policy: Policy, briefs: Sequence[Mapping[str, Any]], verifier: Verifier,
            k: int = 16, n: int = 5, temperature: float = 1.0, seed: int = 0, book: bool = False,
            note: str | None = None) -> dict[str, Any]:
    """`k` answers to each brief, the best `n` distinct valid formulas by train CPCV with their cards, and
    (`book`) the capped book over all valid answers. `verifier`: the train window's (`load_verifier`), and
    `note` what its loading said, kept in the output. A k or n below 1, or a negative temperature, is a
    BriefError."""
    if k < 1 or n < 1:
        raise BriefError(f"k and n must be at least 1 (k={k}, n={n})")
    if not temperature >= 0:
        raise BriefError(f"temperature must be 0 (greedy) or above (got {temperature:g})")
    cat = load_catalogue()
    tol = params.briefs.horizon_tolerance
    # the records themselves: a catalogue brief's fields are its contract, never its text read back
    groups = policy.generate(list(briefs), n=k, temperature=temperature, seed=seed)
    out: dict[str, Any] = {"decoding": params.policy.decoding, "k": k, "temperature": temperature, "seed": seed,
                           "idea_tau": cat.idea_tau, "briefs": []}
    if note:
        out["note"] = note
    pool: dict[str, Any] = {}                  # canonical -> a valid card, over every brief (the book's pool)
    idea = IdeaCheck(verifier.panel, cat)      # mechanism fidelity on the train panel the verifier scores on
    for b, answers in zip(briefs, groups, strict=True):
        kept = policy.contracts is not None and policy.contracts.reads(b)
        checker = BriefChecker({f: b[f] for f in FIELDS}, cat, tol, idea=idea) if all(f in b for f in CHECKS) \
            else None
        cards = verifier.score_group(list(answers), answer=True, brief=checker)
        counts: dict[str, int] = {}
        best: dict[str, Any] = {}
        for c in cards:
            if c.valid and c.canonical:
                counts[c.canonical] = counts.get(c.canonical, 0) + 1
                best.setdefault(c.canonical, c)
                pool.setdefault(c.canonical, c)
        ranked = sorted(best.values(), key=lambda c: -c.channels["cpcv"])[:n]
        entry: dict[str, Any] = {
            "brief": b["text"], "fields": {f: b[f] for f in FIELDS if f in b} or None,
            **({"asked_as": b["asked_as"]} if b.get("asked_as") else {}),
            "constrained": "brief" if kept else ("grammar" if policy.grammar is not None else "free"),
            "answers": len(cards), "valid": sum(c.valid for c in cards), "distinct": len(best),
            "proposals": [_card_row(c, counts[c.canonical], cat.idea_tau) for c in ranked]}
        invalid = [c for c in cards if not c.valid]
        if invalid:          # why answers were dropped, so that "0 of 16 valid" is never left unexplained
            entry["invalid"] = dict(Counter(c.error_type or "invalid" for c in invalid).most_common())
            entry["invalid_example"] = f"{invalid[0].formula or invalid[0].text!r}: {invalid[0].reason}"
        notes = []
        if b.get("asked_as"):
            notes.append("read as the catalogue brief above, asked in the catalogue's words")
        if not kept and policy.contracts is not None:
            read = ", ".join(f"{f}={v}" for f, v in (b.get("read") or {}).items())
            unread = ", ".join(b.get("unread") or [])
            notes.append("not a catalogue brief: answered under the grammar alone (no brief checks)"
                         + (f"; read {read}" if read else "") + (f"; could not read {unread}" if unread else ""))
        if temperature == 0 and k > 1:
            notes.append(f"temperature 0 is greedy: the {k} answers are one answer {k} times")
        if notes:
            entry["note"] = "; ".join(notes)
        if checker is not None:
            valid = [c for c in cards if c.valid]
            entry["compliant_share"] = (float(np.mean([c.metrics.get("compliant", 0.0) for c in valid]))
                                        if valid else None)
        out["briefs"].append(entry)
    if book:
        out["book"] = _book(params, verifier, list(pool.values()))
    return out


def _book(params: Params, verifier: Verifier, cards: Sequence[Any]) -> dict[str, Any] | None:
    """The correlation-capped book over the valid answers (train CPCV order, `books.min_turnover`,
    `books.max_corr`), measured on the train window it was chosen on."""
    cards = [c for c in cards if c.pnl is not None]
    if not cards:
        return None
    pnls = np.stack([c.pnl for c in cards])
    pick = capped_selection([c.channels["cpcv"] for c in cards], [c.metrics["turnover"] for c in cards], pnls,
                            params.books.min_turnover, params.books.max_corr)
    if not pick:
        return {"members": [], "note": "no answer passes the book's turnover floor"}
    market = verifier.market[verifier.rows]
    metrics = book_metrics(pnls[pick], market, params.books.down_day)
    keep = ("answers", "return", "sharpe", "max_drawdown", "beta", "market_corr", "mean_pairwise_corr",
            "effective_bets")
    return {"window": "train", "members": [cards[i].canonical for i in pick], **{k: metrics[k] for k in keep}}
