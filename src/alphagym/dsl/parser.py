"""Recursive-descent parser: formula text -> immutable AST, or a typed error with a position.

Hand-written because the language must be exactly this and nothing more: no `eval`, no host-language
grammar, every rule checked at the token where it breaks. Precedence, loosest first:
    c ? a : b  |  ||  |  &&  |  < <= > >= == !=  |  + -  |  * /  |  unary -  |  ^ (right-assoc)
Total and bounded: the lexer caps characters and tokens, a nesting guard caps recursion, so any string
returns an AST or a DslError in bounded time and memory.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass

from alphagym.dsl.ast import Call, Field, Node, Num, depth, walk
from alphagym.dsl.degenerate import constant_arguments, constant_call
from alphagym.dsl.errors import ArityError, DegenerateError, LimitError, ParseError, UnknownNameError, WindowError
from alphagym.dsl.lexer import Token, tokenize
from alphagym.dsl.registry import ALIASES, FIELDS, GROUPS, INFIX, OPS
from alphagym.params import Limits as LimitsParams

_ADV = re.compile(r"^adv(\d+)$")
CHAIN_MARKS = 4      # checkpoints kept per open operator chain (`FinishedCalls.mark`)


@dataclass(frozen=True)
class Limits:
    """Defaults equal params.yaml `dsl.limits`; the verifier passes the params' values."""
    max_tokens: int = 256
    max_depth: int = 16
    max_window: int = 252
    max_lookback: int = 252
    max_chars: int = 4096

    @classmethod
    def from_params(cls, params: LimitsParams | None) -> Limits:
        if params is None:
            return cls()
        return cls(params.max_tokens, params.max_depth, params.max_window, params.max_lookback, params.max_chars)


class FinishedCalls:
    """Calls that prefix-mode parses finished, for the parses of texts that begin the same way: the grammar
    checker parses an answer again at every token (and every candidate token), and all but the calls still
    open at its end were parsed before. A call's parse depends only on its own tokens and on what the
    enclosing parse has open (the depth the unfinished nodes add, the nesting, each open call's least
    lookback); it reads nothing past its ')'. So an entry, keyed by the text before the call's name and that
    context, is reused when the tokens from the name to the ')' are the same tokens (positions included),
    and a re-parse walks only the spine of calls still open. Errors are never kept: a call that fails is
    parsed again. Bounded: cleared when it holds `size` entries."""

    def __init__(self, size: int = 100_000) -> None:
        self.size = size
        self.entries: dict[tuple, tuple[Node, int, tuple[Token, ...], tuple[int, int]]] = {}
        # an operator chain still open (`a + b + c + ...` inside an open call): the left operand built up to
        # each of its last few operators (`_Parser.binary`), so that a parse one token longer resumes at the
        # last operator instead of walking the chain again, which would make judging a token cost more the
        # longer the answer
        self.chains: dict[tuple, list[tuple[int, tuple[Token, ...], Node, tuple[int, int]]]] = {}

    def get(self, key: tuple) -> tuple[Node, int, tuple[Token, ...], tuple[int, int]] | None:
        return self.entries.get(key)

    def put(self, key: tuple, value: tuple[Node, int, tuple[Token, ...], tuple[int, int]]) -> None:
        if len(self.entries) >= self.size:
            self.entries.clear()
        self.entries[key] = value

    def resume(self, key: tuple, tokens: list[Token], start: int) -> tuple[int, Node, tuple[int, int]] | None:
        """The latest checkpoint of the chain `key` whose tokens, from the chain's first (`start`) to its
        operator, are this text's: (the operator's index, the left operand before it, that operand's shape)."""
        for j, span, node, shape in self.chains.get(key, ()):
            if len(tokens) > j and tuple(tokens[start:j + 1]) == span:
                return j, node, shape
        return None

    def mark(self, key: tuple, tokens: list[Token], start: int, j: int, node: Node, shape: tuple[int, int]) -> None:
        """Keep the checkpoint at the chain's operator `j` (the last `CHAIN_MARKS` of each chain, newest first:
        the candidate tokens tried after one answer mark different operators)."""
        marks = self.chains.get(key)
        if marks is None:
            if len(self.chains) >= self.size:
                self.chains.clear()
            marks = self.chains[key] = []
        span = tuple(tokens[start:j + 1])
        if any(m[0] == j and m[1] == span for m in marks):
            return
        marks.insert(0, (j, span, node, shape))
        del marks[CHAIN_MARKS:]


class _Parser:
    """`prefix=True` is the grammar-constrained decoder's mode (`dsl.prefix`): every rule that the full
    parse checks only at a call's closing ')' (unknown function, too many arguments, a window that is not a
    literal in range, the lookback and depth limits) is checked as soon as the offending token appears, so a
    prefix that parses up to its end can always be completed."""

    def __init__(self, text: str, limits: Limits, prefix: bool = False,
                 unavailable: frozenset[str] = frozenset(), tokens: list[Token] | None = None,
                 finished: FinishedCalls | None = None) -> None:
        self.text, self.limits, self.prefix, self.unavailable = text, limits, prefix, unavailable
        self.memo: dict[int, tuple[int, int]] = {}
        # `tokens`: the text's tokens when the caller has them (`PrefixChecker` lexes only a prefix's tail)
        self.tokens: list[Token] = tokens if tokens is not None else tokenize(text, limits.max_tokens,
                                                                              limits.max_chars)
        self.finished = finished
        self.i = 0
        self.tok: Token = self.tokens[0]
        self.nest = 0
        self.max_nest = 2 * limits.max_depth + 8
        # prefix mode: the least lookback each open call will add once closed (1 for a shift such as delay
        # or ts_delta, whose window is at least 1; 0 otherwise), innermost last. A subtree's lookback plus
        # the enclosing calls' least must fit, or no completion can: `delay(ts_sum(x, 252), ` is dead.
        self.pending: list[int] = []
        # prefix mode: the least depth the enclosing unfinished nodes will add once built (one per open call,
        # per infix operator or '^' whose right side is being read, per open ternary). A subtree's depth plus
        # it must fit, or no completion can: an operator chain deepens its tree at every operator, so the
        # full parse's depth limit would otherwise be met only after the text has run into a dead end.
        self.outer = 0
        # prefix mode: the deepest level a check reached (a subtree's depth plus what the enclosing unfinished
        # nodes still add): a floor on the depth of every completion (`PrefixChecker.depth_floor`)
        self.deepest = 0

    # -- helpers --
    def advance(self) -> None:
        """Move past the current token. `tok` is kept as an attribute, not looked up: the rules read it
        about five times a token, and the grammar checker parses every prefix the policy writes."""
        self.i += 1
        self.tok = self.tokens[self.i]

    def accept(self, text: str) -> bool:
        tok = self.tok
        if tok.kind == "op" and tok.text == text:
            self.advance()
            return True
        return False

    def expect(self, text: str, what: str) -> Token:
        tok = self.tok
        if not self.accept(text):
            found = "end of formula" if tok.kind == "end" else repr(tok.text)
            raise ParseError(f"expected {text!r} {what}, found {found}", tok.pos, self.text)
        return tok

    def enter(self) -> None:
        self.nest += 1
        if self.nest > self.max_nest:
            raise LimitError(f"nesting deeper than {self.max_nest} levels", self.tok.pos, self.text)

    # -- grammar --
    def parse(self) -> Node:
        node = self.ternary()
        if self.tok.kind != "end":
            raise ParseError(f"unexpected {self.tok.text!r} after a complete formula", self.tok.pos, self.text)
        return node

    def ternary(self) -> Node:
        self.enter()
        cond = self.binary(0)
        if self.tok.kind == "op" and self.tok.text == "?":
            if self.prefix:
                self.check_depth(self.shape(cond)[0] + 1, self.tok)
            self.advance()
            self.outer += 1
            yes = self.ternary()
            self.expect(":", "in a 'c ? a : b' expression")
            no = self.ternary()
            self.outer -= 1
            cond = Call("where", (cond, yes, no))
        self.nest -= 1
        return cond

    _LEVELS = (("||",), ("&&",), ("<", "<=", ">", ">=", "==", "!="), ("+", "-"), ("*", "/"))
    _PREC = {op: level for level, ops in enumerate(_LEVELS) for op in ops}

    def binary(self, level: int) -> Node:
        """Precedence climbing over `_LEVELS`: the operators at `level` and tighter, left-associative.
        Prefix mode with `finished`: the left operand built before each operator is kept, and a text whose
        chain begins with the same tokens resumes at its latest kept operator (`FinishedCalls.resume`): the
        left operand depends only on the tokens up to that operator and on what the enclosing parse has
        open, the same context `finished_call` keys by."""
        key, start, left = None, self.i, None
        if self.finished is not None:
            key = (self.text[: self.tok.pos], level, self.outer, self.nest, tuple(self.pending))
            hit = self.finished.resume(key, self.tokens, start)
            if hit is not None:
                j, left, shape = hit
                self.i, self.tok = j, self.tokens[j]
                self.memo[id(left)] = shape
        if left is None:
            left = self.unary()
        while self.tok.kind == "op" and self._PREC.get(self.tok.text, -1) >= level:
            op = self.tok.text
            if key is not None and self.finished is not None:
                self.finished.mark(key, self.tokens, start, self.i, left, self.shape(left))
            if self.prefix:
                self.check_depth(self.shape(left)[0] + 1, self.tok)
            self.advance()
            self.outer += 1
            right = self.binary(self._PREC[op] + 1)
            self.outer -= 1
            left = Call(INFIX[op], (left, right))
        return left

    def unary(self) -> Node:
        if self.tok.kind == "op" and self.tok.text in ("-", "+"):
            sign, tok = self.tok.text, self.tok
            self.advance()
            self.enter()
            # `-name...` is sure to build a `neg` level; `-2` builds none, `-(...)` is known only once read
            ahead = int(sign == "-" and self.tok.kind == "name")
            self.outer += ahead
            operand = self.unary()
            self.outer -= ahead
            self.nest -= 1
            if sign == "+" or isinstance(operand, Num):
                return operand if sign == "+" else Num(-operand.value)
            node = Call("neg", (operand,))
            if self.prefix:                # its level is not counted ahead: `-` before a literal adds none
                self.check_depth(self.shape(node)[0], tok)
            return node
        return self.power()

    def power(self) -> Node:
        base = self.primary()
        if self.tok.kind == "op" and self.tok.text == "^":
            if self.prefix:
                self.check_depth(self.shape(base)[0] + 1, self.tok)
            self.advance()
            self.enter()
            self.outer += 1
            exponent = self.unary()
            self.outer -= 1
            self.nest -= 1
            return Call("pow", (base, exponent))
        return base

    def primary(self) -> Node:
        tok = self.tok
        if tok.kind == "num":
            self.advance()
            return Num(tok.value)
        if tok.kind == "op" and tok.text == "(":
            self.advance()
            node = self.ternary()
            self.expect(")", "to close the parenthesis")
            return node
        if tok.kind == "name":
            self.advance()
            if self.tok.kind == "op" and self.tok.text == "(":
                return self.call(tok) if self.finished is None else self.finished_call(tok)
            return self.name(tok)
        found = "end of formula" if tok.kind == "end" else repr(tok.text)
        raise ParseError(f"expected a number, a field, a function or '(', found {found}", tok.pos, self.text)

    def name(self, tok: Token) -> Node:
        low = tok.text.lower()
        if low in FIELDS:
            if low in self.unavailable:
                raise UnknownNameError(f"field {tok.text!r} is not in this panel", tok.pos, self.text)
            return Field(low)
        m = _ADV.match(low)
        if m:
            d = self.window_value(float(m.group(1)), tok, "adv")
            node = Call("ts_mean", (Call("mul", (Field("close"), Field("volume"))),), window=d)
            if self.prefix:                # three levels for one name
                self.check_depth(self.shape(node)[0], tok)
            return node
        if low.startswith("indclass."):
            raise ParseError(f"{tok.text} is only allowed as the second argument of indneutralize",
                             tok.pos, self.text)
        if low in OPS or low in ALIASES:
            raise ParseError(f"{tok.text!r} is a function; call it with '('", tok.pos, self.text)
        # prefix mode's messages are not read (the decoder asks only where a text breaks): no hint to look up
        hint = difflib.get_close_matches(low, list(FIELDS), n=1) if not self.prefix else []
        raise UnknownNameError(f"unknown field {tok.text!r}" + (f" (did you mean {hint[0]!r}?)" if hint else ""),
                               tok.pos, self.text)

    def call(self, tok: Token) -> Node:
        low = tok.text.lower()
        self.expect("(", "after a function name")
        most = self.max_args(low, tok) if self.prefix else 0
        if self.prefix:
            self.pending.append(self.least_own_lookback(low))
            self.check_depth(2, tok)          # the call over at least one argument
            self.outer += 1
        args: list[tuple[Node | str, Token]] = []
        if not self.accept(")"):
            while True:
                start = self.tok
                if self.prefix and self.literal_slot(low, len(args)):
                    args.append((self.literal(low, args), start))
                elif start.kind == "name" and start.text.lower().startswith("indclass."):
                    if self.prefix:          # indneutralize's group slot is a literal slot, taken above
                        raise ParseError(f"{start.text} is only allowed as the second argument of indneutralize",
                                         start.pos, self.text)
                    self.advance()
                    args.append((start.text.lower().split(".", 1)[1], start))
                else:
                    args.append((self.ternary(), start))
                if self.accept(")"):
                    break
                if self.tok.kind == "end":       # cut short: the ')' is what is missing, not a ','
                    if self.prefix:
                        self.check_growth(low, args)
                    raise ParseError(f"missing ')' to close {tok.text}( opened at position {tok.pos}, found end "
                                     "of formula", self.tok.pos, self.text)
                self.expect(",", "between arguments")
                if self.prefix and len(args) >= most:
                    raise self.arity(low, tok, len(args) + 1, f"at most {most}")
                op = ALIASES.get(low, low)
                if self.prefix and op in ("ts_corr", "ts_cov") and isinstance(args[-1][0], Node):
                    # one literal operand is enough to make these constant: refused at the ',' that seals it
                    self.check_constant(constant_arguments(op, [args[-1][0]]), tok)
                if self.prefix and self.literal_slot(low, len(args)):
                    # the expression arguments are complete: a constant call is refused at this ',', since
                    # no window written after it could make it vary (the decoder must leave a way out)
                    if all(not isinstance(a, str) for a, _ in args):
                        self.check_constant(constant_arguments(ALIASES.get(low, low), [a for a, _ in args]), tok)
        node = self.build(low, tok, args)
        if isinstance(node, Call):
            self.check_constant(constant_call(node), tok)
        if self.prefix:
            self.pending.pop()
            self.outer -= 1
            d, lb = self.shape(node)
            self.check_depth(d, tok)
            self.check_lookback(lb, tok)
        return node

    def finished_call(self, tok: Token) -> Node:
        """`call`, reusing the call a text with the same beginning already parsed in full (`FinishedCalls`)."""
        i = self.i - 1                               # the function name's token
        key = (self.text[: tok.pos], self.outer, self.nest, tuple(self.pending))
        assert self.finished is not None
        hit = self.finished.get(key)
        if hit is not None:
            node, j, span, shape = hit
            if len(self.tokens) > j and tuple(self.tokens[i:j]) == span:
                self.i, self.tok = j, self.tokens[j]
                self.memo[id(node)] = shape
                if shape[0] + self.outer > self.deepest:    # checked when first parsed, in the same context
                    self.deepest = shape[0] + self.outer
                return node
        node = self.call(tok)
        self.finished.put(key, (node, self.i, tuple(self.tokens[i:self.i]), self.shape(node)))
        return node

    def check_constant(self, reason: str | None, tok: Token) -> None:
        if reason is not None:
            raise DegenerateError(reason, tok.pos, self.text)

    def least_own_lookback(self, low: str) -> int:
        """The least lookback a call of `low` adds to its arguments' (prefix mode; see `pending`)."""
        spec = OPS.get(ALIASES.get(low, low))
        return 1 if spec is not None and spec.lookback == "shift" else 0

    def check_depth(self, d: int, tok: Token) -> None:
        """Prefix mode: a subtree of depth `d` (or a node about to be built over one), plus the least the
        enclosing unfinished nodes add, fits the depth limit."""
        if self.prefix and d + self.outer > self.deepest:
            self.deepest = d + self.outer
        if self.prefix and d + self.outer > self.limits.max_depth:
            more = f" with the {self.outer} levels the enclosing expressions still add" if self.outer else ""
            raise LimitError(f"expression depth exceeds {self.limits.max_depth}{more}", tok.pos, self.text)

    def check_growth(self, low: str, args: list[tuple[Node | str, Token]]) -> None:
        """Prefix mode, a call cut short after an argument: where its expression arguments so far make it
        constant by `constant_arguments` (a time-series or cross-sectional call of literals, `ts_corr`/`ts_cov`
        with one: `ts_delta(2`, `ts_corr(close, 2`), only an operator over the last one can still rescue it,
        so that operator's level must fit the depth limit (at the limit, `ts_delta( 2` is dead, not open).
        Elementwise calls a literal makes constant (`sign( 2`, `abs( 2`) are judged when they close."""
        last, start = args[-1]
        exprs = [a for a, _ in args if isinstance(a, Node)]
        if isinstance(last, Node) and constant_arguments(ALIASES.get(low, low), exprs) is not None:
            self.check_depth(self.shape(last)[0] + 1, start)

    def check_lookback(self, lb: int, tok: Token) -> None:
        """A finished subtree's lookback `lb`, plus the least the enclosing open calls will add, fits."""
        outer = sum(self.pending)
        if lb + outer > self.limits.max_lookback:
            more = f" with the {outer} the enclosing calls still add" if outer else ""
            raise LimitError(f"total lookback exceeds {self.limits.max_lookback}{more}", tok.pos, self.text)

    def shape(self, node: Node) -> tuple[int, int]:
        """(depth, lookback) of a subtree, memoised over the parse: prefix mode asks it at every call, and
        recomputing each subtree from scratch would make a parse quadratic in the formula's length."""
        key = id(node)
        if key not in self.memo:
            if isinstance(node, Call):
                kids = [self.shape(c) for c in node.args]
                rule = OPS[node.op].lookback
                own = node.window - 1 if rule == "window" else node.window if rule == "shift" else 0
                self.memo[key] = (1 + max((k[0] for k in kids), default=0),
                                  max((k[1] for k in kids), default=0) + own)
            else:
                self.memo[key] = (1, 0)
        return self.memo[key]

    # -- prefix mode only: the checks the full parse makes at ')', made at the token that breaks them --
    def max_args(self, low: str, tok: Token) -> int:
        """The most arguments `low` takes; an unknown function is an error at its name."""
        if low in ("scale", "indneutralize"):
            return 2
        op = ALIASES.get(low, low)
        spec = OPS.get(op)
        if spec is None or spec.infix is not None or op in ("neg", "where"):
            raise UnknownNameError(f"unknown function {tok.text!r}", tok.pos, self.text)
        return spec.arity + (spec.kind == "ts")

    def literal_slot(self, low: str, index: int) -> bool:
        """Whether argument `index` of `low` must be a literal: a window, scale's target, a group."""
        if low in ("scale", "indneutralize"):
            return index == 1
        spec = OPS.get(ALIASES.get(low, low))
        return spec is not None and spec.kind == "ts" and index == spec.arity

    def literal(self, low: str, args: list) -> Num | str:
        """A literal argument and the ')' after it: a window in range whose lookback, added to its
        arguments', fits; scale's numeric target; indneutralize's IndClass group."""
        tok, sign = self.tok, 1.0
        if low == "scale" and tok.kind == "op" and tok.text == "-":     # scale(x, -1) reads as a literal
            self.advance()
            tok, sign = self.tok, -1.0
        if tok.kind == "end":
            raise ParseError(f"expected the last argument of {low}, found end of formula", tok.pos, self.text)
        if low == "indneutralize":
            group = tok.text.lower().split(".", 1)[1] if tok.text.lower().startswith("indclass.") else None
            if tok.kind != "name" or group not in GROUPS:
                raise ParseError(f"second argument of indneutralize must be IndClass.{{{','.join(GROUPS)}}}",
                                 tok.pos, self.text)
            value: Num | str = group
        elif tok.kind != "num":
            raise WindowError(f"the last argument of {low} must be a numeric literal, found {tok.text!r}",
                              tok.pos, self.text)
        else:
            value = Num(sign * tok.value)
            if low != "scale":
                d = self.window_value(tok.value, tok, low)
                spec = OPS[ALIASES.get(low, low)]
                base = max((self.shape(a)[1] for a, _ in args if not isinstance(a, str)), default=0)
                own = d - 1 if spec.lookback == "window" else d
                self.pending[-1] = 0               # this call's own is now known: `own`
                self.check_lookback(base + own, tok)
        self.advance()
        if not (self.tok.kind == "op" and self.tok.text == ")"):
            self.expect(")", "after the last argument")
        return value

    def window_value(self, value: float, tok: Token, op: str) -> int:
        # a literal of 309+ digits reads as inf, and floor(inf) raises OverflowError: check finiteness first
        d = math.floor(value) if math.isfinite(value) else 0
        if not (1 <= d <= self.limits.max_window):
            raise WindowError(f"window of {op} is {value:g}; it must be between 1 and {self.limits.max_window} "
                              "sessions after flooring", tok.pos, self.text)
        return d

    def window(self, arg: tuple[Node | str, Token], op: str) -> int:
        node, tok = arg
        if not isinstance(node, Num):
            raise WindowError(f"the window of {op} must be a numeric literal", tok.pos, self.text)
        return self.window_value(node.value, tok, op)

    def expr_args(self, args: list, op: str, tok: Token) -> tuple[Node, ...]:
        for node, at in args:
            if isinstance(node, str):
                raise ParseError(f"IndClass.{node} is only allowed in indneutralize", at.pos, self.text)
        return tuple(node for node, _ in args)

    def arity(self, op: str, tok: Token, got: int, want: str) -> ArityError:
        return ArityError(f"{op} takes {want} argument(s), got {got}", tok.pos, self.text)

    def build(self, low: str, tok: Token, args: list) -> Node:
        if low in ("min", "max") and len(args) == 2 and isinstance(args[1][0], Num):
            op = "ts_" + low                         # the paper's min(x, d) with a literal d
            return Call(op, self.expr_args(args[:1], op, tok), window=self.window(args[1], op))
        if low == "scale":
            if len(args) not in (1, 2):
                raise self.arity("scale", tok, len(args), "1 or 2 (x[, a])")
            target = None
            if len(args) == 2:
                if not isinstance(args[1][0], Num):
                    raise WindowError("the target of scale(x, a) must be a numeric literal", args[1][1].pos, self.text)
                target = args[1][0].value
            return Call("scale", self.expr_args(args[:1], "scale", tok), param=target)
        if low == "indneutralize":
            if len(args) not in (1, 2):
                raise self.arity("indneutralize", tok, len(args), "1 or 2 (x[, IndClass.level])")
            group = "sector"
            if len(args) == 2:
                group = args[1][0]
                if not isinstance(group, str) or group not in GROUPS:
                    raise ParseError(f"second argument of indneutralize must be IndClass.{{{','.join(GROUPS)}}}",
                                     args[1][1].pos, self.text)
            return Call("indneutralize", self.expr_args(args[:1], "indneutralize", tok), param=group)
        op = ALIASES.get(low, low)
        spec = OPS.get(op)
        if spec is None or spec.infix is not None or op in ("neg", "where"):
            known = sorted({*OPS, *ALIASES} - {"neg", "where"} - {s.name for s in OPS.values() if s.infix})
            hint = difflib.get_close_matches(low, known, n=1) if not self.prefix else []
            raise UnknownNameError(f"unknown function {tok.text!r}" + (f" (did you mean {hint[0]!r}?)" if hint else ""),
                                   tok.pos, self.text)
        if spec.kind == "ts":
            if len(args) != spec.arity + 1:
                raise self.arity(op, tok, len(args), f"{spec.arity} + a window")
            return Call(op, self.expr_args(args[:-1], op, tok), window=self.window(args[-1], op))
        if len(args) != spec.arity:
            raise self.arity(op, tok, len(args), str(spec.arity))
        return Call(op, self.expr_args(args, op, tok))


def lookback(node: Node) -> int:
    """Sessions of history the formula needs before its first value (0 for plain fields)."""
    memo: dict[int, int] = {}
    order = list(walk(node))
    for n in reversed(order):
        if not isinstance(n, Call):
            memo[id(n)] = 0
            continue
        base = max((memo[id(c)] for c in n.args), default=0)
        rule = OPS[n.op].lookback
        memo[id(n)] = base + (n.window - 1 if rule == "window" else n.window if rule == "shift" else 0)
    return memo[id(node)]


def parse(text: str, limits: Limits | None = None) -> Node:
    """Parse one formula; raises a DslError subclass naming the rule and the position."""
    limits = limits or Limits()
    return limited(_Parser(text, limits).parse(), limits, text)


def limited(ast: Node, limits: Limits, text: str) -> Node:
    """The parsed formula `ast` of `text`, once its depth and total lookback are within `limits` (a LimitError
    otherwise): what `parse` checks of the whole tree."""
    d = depth(ast)
    if d > limits.max_depth:
        raise LimitError(f"expression depth {d} exceeds {limits.max_depth}", 0, text)
    lb = lookback(ast)
    if lb > limits.max_lookback:
        raise LimitError(f"total lookback {lb} sessions exceeds {limits.max_lookback}", 0, text)
    return ast
