"""Immutable AST. Three node types are enough: a number, a field, and a call of a registered operator.

Infix operators parse to calls (`a + b` -> Call('add', (a, b))), windows are stored as ints on the call,
and operator-specific literal parameters (scale's target, indneutralize's group) in `param`.
Nodes are frozen and hashable, so structurally equal subtrees share one cache entry in the evaluator.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Num:
    value: float


@dataclass(frozen=True, slots=True)
class Field:
    name: str


@dataclass(frozen=True, slots=True)
class Call:
    op: str
    args: tuple[Node, ...]
    window: int | None = None
    param: float | str | None = None


Node = Num | Field | Call


def children(node: Node) -> tuple[Node, ...]:
    return node.args if isinstance(node, Call) else ()


def walk(node: Node):
    """Pre-order traversal without recursion (safe on any depth the parser accepts)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def depth(node: Node) -> int:
    best, stack = 0, [(node, 1)]
    while stack:
        n, d = stack.pop()
        best = max(best, d)
        stack.extend((c, d + 1) for c in children(n))
    return best
