"""Tokenizer for the formula language. Hand-written: a fixed, tiny token set with positions for errors.

Bounded by construction: it stops at the first character past `max_chars` or the first token past
`max_tokens`, so any input, however large, costs at most O(max_chars) work.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from alphagym.dsl.errors import LexError, LimitError

_NUMBER = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")
_DIGITS = frozenset("0123456789")
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_OPERATORS = ("||", "&&", "<=", ">=", "==", "!=", "+", "-", "*", "/", "^", "<", ">", "?", ":", "(", ")", ",")
_TWO = frozenset(op for op in _OPERATORS if len(op) == 2)
_ONE = frozenset(op for op in _OPERATORS if len(op) == 1)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str      # 'num' | 'name' | 'op' | 'end'
    text: str
    pos: int
    value: float = 0.0


def tokenize(text: str, max_tokens: int = 256, max_chars: int = 4096) -> list[Token]:
    if not isinstance(text, str):
        raise LexError(f"formula must be a string, got {type(text).__name__}")
    if len(text) > max_chars:
        raise LimitError(f"formula has {len(text)} characters; the limit is {max_chars}", 0)
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t\r\n":
            i += 1
            continue
        if len(tokens) >= max_tokens:
            raise LimitError(f"more than {max_tokens} tokens", i, text)
        if ch in _DIGITS or (ch == "." and i + 1 < n and text[i + 1] in _DIGITS):
            m = _NUMBER.match(text, i)
            assert m is not None
            value = float(m.group(0))
            if not math.isfinite(value) or abs(value) > 1e12:
                raise LimitError(f"numeric literal {m.group(0)!r} is out of range (|x| <= 1e12)", i, text)
            tokens.append(Token("num", m.group(0), i, value))
            i = m.end()
            continue
        if ch in _NAME_START:
            m = _NAME.match(text, i)
            assert m is not None
            tokens.append(Token("name", m.group(0), i))
            i = m.end()
            continue
        op = text[i:i + 2]               # two-character operators first: '<=' is not '<' then '='
        if op not in _TWO:
            op = ch
            if op not in _ONE:
                shown = ch if ch.isprintable() else repr(ch)
                raise LexError(f"unexpected character {shown!r}", i, text)
        tokens.append(Token("op", op, i))
        i += len(op)
    tokens.append(Token("end", "", n))
    return tokens
