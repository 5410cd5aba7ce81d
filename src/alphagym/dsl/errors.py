"""Typed DSL errors. Each carries the rule broken and the character position, so the verifier can score
different failures differently and a person can see where the formula went wrong."""

from __future__ import annotations

from alphagym.errors import AlphagymError


class DslError(AlphagymError):
    rule = "dsl"

    def __init__(self, message: str, pos: int | None = None, text: str | None = None) -> None:
        self.message, self.pos = message, pos
        where = f" at position {pos}" if pos is not None else ""
        snippet = ""
        if text is not None and pos is not None:
            lo = max(0, pos - 20)
            snippet = f": ...{text[lo:pos]}>>>{text[pos:pos + 20]}..."
        super().__init__(f"[{self.rule}] {message}{where}{snippet}")


class LexError(DslError):
    rule = "lex"


class ParseError(DslError):
    rule = "syntax"


class UnknownNameError(DslError):
    rule = "unknown_name"


class ArityError(DslError):
    rule = "arity"


class WindowError(DslError):
    """A window that is not a literal, or outside [1, max_window] after flooring."""
    rule = "window"


class LimitError(DslError):
    """Too many tokens, too deep, too long a lookback, or a literal out of range."""
    rule = "limit"


class DegenerateError(DslError):
    """A call that is constant by construction (`dsl.degenerate`): sign of a quantity positive (or
    negative) on almost every day, an operator over literals only, ts_corr of a series with itself."""
    rule = "constant"


class UnavailableFieldError(DslError):
    """A field the grammar knows but the panel does not carry (e.g. `cap`)."""
    rule = "unavailable_field"


class AnswerTagError(DslError):
    """The answer has no `<alpha>...</alpha>` block, or more than one."""
    rule = "tag"


class MissingTagError(AnswerTagError):
    rule = "missing_tag"


class DoubledTagError(AnswerTagError):
    rule = "doubled_tag"
