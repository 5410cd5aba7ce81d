"""Tokenizer for the formula language. Hand-written: a fixed, tiny token set with positions for errors.

Bounded by construction: it stops at the first character past `max_chars` or the first token past
`max_tokens`, so any input, however large, costs at most O(max_chars) work.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from alphagym.dsl.errors import LexError, LimitError

# one token after optional whitespace: a number, a name (`IndClass.sector` is one), an operator (two-character
# ones first: '<=' is not '<' then '='). One compiled pattern a token: the grammar checker lexes every prefix
# of every answer the policy writes, so this loop is the checker's inner loop.
_TOKEN = re.compile(r"[ \t\r\n]*(?:"
                    r"((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
                    r"|([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)"
                    r"|(\|\||&&|<=|>=|==|!=|[-+*/^<>?:(),]))")
_SPACE = re.compile(r"[ \t\r\n]*")


class Token(NamedTuple):
    kind: str      # 'num' | 'name' | 'op' | 'end'
    text: str
    pos: int
    value: float = 0.0


def tokenize(text: str, max_tokens: int = 256, max_chars: int = 4096, head: list[Token] | None = None,
             start: int = 0) -> list[Token]:
    """The tokens of `text`, then an 'end' token. `head`: the tokens of `text[:start]` (no 'end'), when
    `text[start]` is whitespace: no token spans whitespace, so lexing resumes there with the same result."""
    if not isinstance(text, str):
        raise LexError(f"formula must be a string, got {type(text).__name__}")
    if len(text) > max_chars:
        raise LimitError(f"formula has {len(text)} characters; the limit is {max_chars}", 0)
    tokens: list[Token] = list(head) if head is not None else []
    append, match = tokens.append, _TOKEN.match
    i, n = (start, len(text)) if head is not None else (0, len(text))
    while True:
        m = match(text, i)
        if m is None:
            i = _SPACE.match(text, i).end()           # type: ignore[union-attr]  (it matches the empty string)
            if i >= n:
                break
            if len(tokens) >= max_tokens:
                raise LimitError(f"more than {max_tokens} tokens", i, text)
            ch = text[i]
            shown = ch if ch.isprintable() else repr(ch)
            raise LexError(f"unexpected character {shown!r}", i, text)
        num, name, op = m.groups()
        at = m.start(1 if num is not None else 2 if name is not None else 3)
        if len(tokens) >= max_tokens:
            raise LimitError(f"more than {max_tokens} tokens", at, text)
        if num is not None:
            value = float(num)
            if not math.isfinite(value) or abs(value) > 1e12:
                raise LimitError(f"numeric literal {num!r} is out of range (|x| <= 1e12)", at, text)
            append(Token("num", num, at, value))
        elif name is not None:
            append(Token("name", name, at))
        else:
            append(Token("op", op, at))
        i = m.end()
    append(Token("end", "", n))
    return tokens
