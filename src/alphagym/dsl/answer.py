"""Take the formula out of a model answer: exactly one `<alpha>...</alpha>` block.

Convention (as chat models are trained and scored elsewhere): when the answer has a reasoning block
(`<think>...</think>` or `<reasoning>...</reasoning>`), the answer is what follows the last closing
reasoning tag; whatever the reasoning says, `<alpha>` tags included, is not the answer. Without a reasoning
block the whole text is the answer. Either way that part must hold exactly one `<alpha>` block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from alphagym.dsl.errors import DoubledTagError, MissingTagError

_OPEN, _CLOSE = re.compile(r"<alpha>", re.I), re.compile(r"</alpha>", re.I)
_BLOCK = re.compile(r"<alpha>(.*?)</alpha>", re.I | re.S)
_REASONING = re.compile(r"<(think|reasoning)>(.*?)</\1>", re.I | re.S)
_REASONING_END = re.compile(r"</(think|reasoning)>", re.I)


@dataclass(frozen=True)
class Answer:
    formula: str
    reasoning: str | None       # text of a reasoning block before the answer, if any


def extract(text: str) -> Answer:
    ends = list(_REASONING_END.finditer(text))
    head, answer = (text[: ends[-1].end()], text[ends[-1].end():]) if ends else ("", text)
    opens, closes = len(_OPEN.findall(answer)), len(_CLOSE.findall(answer))
    if opens == 0 and closes == 0:
        where = " after the reasoning block" if ends else ""
        raise MissingTagError(f"answer has no <alpha>...</alpha> block{where}")
    if opens > 1 or closes > 1:
        raise DoubledTagError(f"answer has {max(opens, closes)} <alpha> tags; exactly one block is allowed")
    m = _BLOCK.search(answer)
    if m is None:
        raise MissingTagError("answer has an unclosed or misordered <alpha> tag")
    blocks = list(_REASONING.finditer(head + answer[: m.start()]))
    reasoning = blocks[-1].group(2).strip() if blocks and blocks[-1].group(2).strip() else None
    return Answer(m.group(1).strip(), reasoning)
