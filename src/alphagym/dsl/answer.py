"""Take the formula out of a model answer: exactly one `<alpha>...</alpha>` block."""

from __future__ import annotations

import re
from dataclasses import dataclass

from alphagym.dsl.errors import DoubledTagError, MissingTagError

_OPEN, _CLOSE = re.compile(r"<alpha>", re.I), re.compile(r"</alpha>", re.I)
_BLOCK = re.compile(r"<alpha>(.*?)</alpha>", re.I | re.S)
_REASONING = re.compile(r"<(think|reasoning)>(.*?)</\1>", re.I | re.S)


@dataclass(frozen=True)
class Answer:
    formula: str
    reasoning: str | None       # text of a reasoning block before the answer, if any


def extract(text: str) -> Answer:
    opens, closes = len(_OPEN.findall(text)), len(_CLOSE.findall(text))
    if opens == 0 and closes == 0:
        raise MissingTagError("answer has no <alpha>...</alpha> block")
    if opens > 1 or closes > 1:
        raise DoubledTagError(f"answer has {max(opens, closes)} <alpha> tags; exactly one block is allowed")
    m = _BLOCK.search(text)
    if m is None:
        raise MissingTagError("answer has an unclosed or misordered <alpha> tag")
    before = text[: m.start()]
    r = _REASONING.search(before)
    reasoning = r.group(2).strip() if r and r.group(2).strip() else None
    return Answer(m.group(1).strip(), reasoning)
