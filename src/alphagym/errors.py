"""Typed errors. Every error names the thing and the place so a user can fix the input, not the code."""

from __future__ import annotations


class AlphagymError(Exception):
    """Base class of every error alphagym raises on purpose."""


class ConfigError(AlphagymError):
    """A parameter is missing, unknown or of the wrong type (names the key and the file)."""


class DataError(AlphagymError):
    """Bad market data. Names the file, the ticker, the date and the rule that failed."""

    def __init__(self, rule: str, detail: str, *, file: str | None = None, ticker: str | None = None,
                 date: str | None = None) -> None:
        self.rule, self.detail, self.file, self.ticker, self.date = rule, detail, file, ticker, date
        where = ", ".join(f"{k} {v}" for k, v in (("file", file), ("ticker", ticker), ("date", date)) if v)
        super().__init__(f"[{rule}] {detail}" + (f" ({where})" if where else ""))


class ArtifactError(DataError):
    """A stored artifact (a stage's output, a checkpoint's file) is missing, truncated, garbled or lacks what
    its reader needs. Names the file and what is wrong (`alphagym.artifacts` raises it)."""

    def __init__(self, file: object, detail: str, *, rule: str = "bad_artifact") -> None:
        super().__init__(rule, detail, file=str(file))


class SourceUnavailableError(AlphagymError):
    """A data source cannot be reached (no network, no folder); names the alternatives."""


class BriefError(AlphagymError):
    """A design brief or brief file is malformed; names the file, the line and the field."""

    def __init__(self, detail: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.detail, self.file, self.line, self.field = detail, file, line, field
        where = ", ".join(f"{k} {v}" for k, v in (("file", file), ("line", line), ("field", field)) if v)
        super().__init__(detail + (f" ({where})" if where else ""))


class PolicyError(AlphagymError):
    """A policy cannot be built, loaded or run (a corrupted checkpoint, a missing backend, no GPU)."""


class ResumeError(PolicyError):
    """A rung's saved training state cannot be continued under the current recipe (another recipe, seed or
    base model, or more steps done than the recipe asks for); names both values and how to start afresh."""


class StageBusyError(AlphagymError):
    """Another process is running the same stage on the same results folder; names its pid."""


class WriteError(AlphagymError):
    """A folder or file alphagym must write cannot be written (a read-only file system, no permission, a full
    disk); names the path, the system's reason and what to do."""
