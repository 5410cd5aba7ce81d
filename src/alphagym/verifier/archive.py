"""The novelty archive: daily P&L of up to `capacity` books (first in, first out) and the canonical forms
seen. Seeded with the Alpha101 books; the trainer adds valid answers. Stored as one .npz file. And R16's
running book (`MarginalBook`): the policy's own answers that pay on the train window, correlation-capped.

P&L rows are kept standardised (mean 0, unit norm), so max |corr| against the archive is one
matrix-vector product.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from alphagym.artifacts import read_npz
from alphagym.errors import ArtifactError


def standardise(pnl: np.ndarray) -> np.ndarray | None:
    z = pnl - pnl.mean()
    norm = float(np.sqrt(z @ z))
    return z / norm if norm > 0 else None


class NoveltyArchive:
    """A ring buffer of standardised P&L rows: adding is O(T), the oldest row is overwritten when full."""

    def __init__(self, length: int, capacity: int = 1024) -> None:
        self.length, self.capacity = length, capacity
        self._buf = np.zeros((capacity, length))
        self._labels: list[str | None] = [None] * capacity
        self._count = 0
        self.source: str | None = None        # the file it was loaded from, for error messages
        self._next = 0          # slot the next row goes to (the oldest once full)
        self.canonicals: Counter[str] = Counter()

    def __len__(self) -> int:
        return self._count

    @property
    def rows(self) -> np.ndarray:
        """Rows oldest first."""
        if self._count < self.capacity:
            return self._buf[: self._count]
        return np.roll(self._buf, -self._next, axis=0)

    @property
    def labels(self) -> list[str]:
        if self._count < self.capacity:
            return [lbl for lbl in self._labels[: self._count] if lbl is not None]
        return [lbl for lbl in self._labels[self._next:] + self._labels[: self._next] if lbl is not None]

    def max_abs_corr(self, pnl: np.ndarray) -> float:
        z = standardise(pnl)
        if z is None or self._count == 0:
            return 0.0
        return float(np.max(np.abs(self._buf[: self._count] @ z)))

    def seen(self, canonical: str) -> bool:
        return self.canonicals[canonical] > 0

    def add(self, pnl: np.ndarray, canonical: str, label: str) -> None:
        """Add one book; when full, the oldest leaves (its canonical form too). A flat P&L is not added."""
        z = standardise(pnl)
        if z is None:
            return
        old = self._labels[self._next]
        if old is not None:
            self.canonicals[old.split("\t", 1)[0]] -= 1
        self._buf[self._next] = z
        self._labels[self._next] = canonical + "\t" + label
        self.canonicals[canonical] += 1
        self._next = (self._next + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez_compressed(tmp, rows=self.rows, labels=np.array(json.dumps(self.labels)),
                            meta=np.array(json.dumps({"length": self.length, "capacity": self.capacity})))
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> NoveltyArchive:
        f = read_npz(path, keys=("meta", "rows", "labels"), what="novelty archive")
        try:
            meta, labels = json.loads(str(f["meta"])), json.loads(str(f["labels"]))
            rows = np.asarray(f["rows"], dtype=np.float64)
            length, capacity = int(meta["length"]), int(meta["capacity"])
            ok = rows.ndim == 2 and rows.shape[1] == length and len(labels) == len(rows) <= capacity
        except (ValueError, KeyError, TypeError) as exc:
            raise ArtifactError(path, f"novelty archive has a malformed header: {type(exc).__name__}: {exc}") from None
        if not ok:
            raise ArtifactError(path, f"novelty archive holds rows of shape {rows.shape} and {len(labels)} labels "
                                      f"for length {length}, capacity {capacity}")
        arch = cls(length, capacity)
        arch.source = str(path)
        for row, label in zip(rows, labels):          # rows are stored standardised, oldest first
            canonical = label.split("\t", 1)[0]
            arch._buf[arch._next] = row
            arch._labels[arch._next] = label
            arch.canonicals[canonical] += 1
            arch._next = (arch._next + 1) % arch.capacity
            arch._count += 1
        return arch


class MarginalBook:
    """R16's book (`channels.marginal`): the raw daily net P&L of at most `size` of the policy's valid answers
    with train CPCV > 0, every two with |corr| < `max_corr`. A newcomer that correlates at that level with a
    member stays out; when the book is full it replaces the member with the lowest CPCV if its own is higher,
    so the book keeps the best of the distinct bets seen. Train window only (the RL environment's)."""

    def __init__(self, length: int, size: int, max_corr: float) -> None:
        self.length, self.size, self.max_corr = length, size, max_corr
        self.rows = np.zeros((0, length))
        self.cpcvs = np.zeros(0)
        self.labels: list[str] = []
        self._z = np.zeros((0, length))       # the rows standardised, for the |corr| test of each offer

    def __len__(self) -> int:
        return len(self.cpcvs)

    def offer(self, pnl: np.ndarray, cpcv: float, label: str) -> bool:
        """Admit one answer's P&L if it pays, is a bet of its own and fits (class docstring); True if it joined."""
        z = standardise(pnl)
        if cpcv <= 0 or z is None or label in self.labels:
            return False
        if len(self) and float(np.max(np.abs(self._z @ z))) >= self.max_corr:
            return False
        if len(self) < self.size:
            self.rows, self.cpcvs = np.vstack([self.rows, pnl]), np.append(self.cpcvs, cpcv)
            self._z = np.vstack([self._z, z])
            self.labels.append(label)
            return True
        worst = int(np.argmin(self.cpcvs))
        if cpcv <= self.cpcvs[worst]:
            return False
        self.rows[worst], self._z[worst], self.cpcvs[worst], self.labels[worst] = pnl, z, cpcv, label
        return True

    def save(self, path: str | Path) -> None:
        np.savez(path, rows=self.rows, cpcvs=self.cpcvs, labels=np.array(json.dumps(self.labels)))

    @classmethod
    def load(cls, path: str | Path, length: int, size: int, max_corr: float) -> MarginalBook:
        f = read_npz(path, keys=("rows", "cpcvs", "labels"), what="R16's running book")
        book = cls(length, size, max_corr)
        rows, cpcvs, labels = np.asarray(f["rows"], float), np.asarray(f["cpcvs"], float), json.loads(str(f["labels"]))
        if rows.ndim != 2 or rows.shape[1] != length or not len(rows) == len(cpcvs) == len(labels) <= size:
            raise ArtifactError(path, f"R16's book holds rows of shape {rows.shape}, {len(cpcvs)} CPCVs and "
                                      f"{len(labels)} labels for length {length}, size {size}")
        zs = [standardise(r) for r in rows]
        if any(z is None for z in zs):
            raise ArtifactError(path, "R16's book holds a flat P&L row, which no offer admits (garbled?)")
        book.rows, book.cpcvs, book.labels = rows, cpcvs, list(labels)
        book._z = np.stack(zs) if zs else np.zeros((0, length))
        return book
