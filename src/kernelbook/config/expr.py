"""Safe evaluation of the small expressions a study config may hold.

Launch geometry (``grid: [cdiv(N, BN), cdiv(M, BM)]``), constraints (``M % BM == 0``) and
derived sizes (``N: M``) are written as Python-like expressions. They are parsed with
:mod:`ast`, checked, and turned into closures; nothing is handed to ``eval``. Allowed:
integer and float literals, ``True``/``False``, names given by the caller,
``+ - * / // % **``, unary ``- + not``, comparisons (chains too), ``and``/``or``,
``x if c else y``, and the functions ``cdiv``, ``min``, ``max``, ``abs``, ``log2``,
``is_pow2``. Anything else (attributes, subscripts, lambdas, strings, calls to other
functions) is rejected with :class:`ExprError`.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
from collections.abc import Mapping

MAX_LENGTH = 500
MAX_DEPTH = 40
MAX_EXPONENT = 64
MAX_MAGNITUDE = 2**63


class ExprError(ValueError):
    """An expression that is malformed, uses something not allowed, or cannot be computed."""


def _cdiv(a, b):
    _need_ints("cdiv", a, b)
    if b == 0:
        raise ExprError("cdiv by zero")
    return -(-a // b)


def _log2(a):
    _need_ints("log2", a)
    if a <= 0 or a & (a - 1):
        raise ExprError(f"log2({a}) is not an integer")
    return a.bit_length() - 1


def _is_pow2(a):
    _need_ints("is_pow2", a)
    return a > 0 and not a & (a - 1)


def _need_ints(name, *args):
    for a in args:
        if not isinstance(a, int) or isinstance(a, bool):
            raise ExprError(f"{name}() takes integers, got {a!r}")


FUNCTIONS = {"cdiv": _cdiv, "min": min, "max": max, "abs": abs, "log2": _log2, "is_pow2": _is_pow2}
# (fewest, most) arguments of each function
ARITY = {
    "cdiv": (2, 2),
    "min": (2, 16),
    "max": (2, 16),
    "abs": (1, 1),
    "log2": (1, 1),
    "is_pow2": (1, 1),
}

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def parse(text: str) -> ast.Expression:
    """Parse ``text`` into an expression tree, rejecting what the evaluator will not run."""
    if not isinstance(text, str):
        raise ExprError(f"expected an expression string, got {type(text).__name__}")
    return _parse(text)


# A study repeats a few expressions over every size and tuning point (thousands of
# evaluations each time the config is loaded): parse each text once. Trees are never changed.
@functools.lru_cache(maxsize=8192)
def _parse(text: str) -> ast.Expression:
    if len(text) > MAX_LENGTH:
        raise ExprError(f"expression longer than {MAX_LENGTH} characters")
    depth = deepest = 0
    for ch in text:  # brackets add no tree depth, so count them in the text
        depth += (ch in "([{") - (ch in ")]}")
        deepest = max(deepest, depth)
    if deepest > MAX_DEPTH:
        raise ExprError("expression nested too deeply")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"not a valid expression ({e.msg})") from None
    _check(tree.body, 0)
    return tree


def _check(node: ast.AST, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ExprError("expression nested too deeply")
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or type(node.value) in (int, float):
            return
        raise ExprError(f"literal {node.value!r} is not a number")
    if isinstance(node, ast.Name):
        if node.id.startswith("_"):
            raise ExprError(f"name '{node.id}' is not allowed")
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise ExprError(f"operator {type(node.op).__name__} is not allowed")
        _check(node.left, depth + 1)
        _check(node.right, depth + 1)
        return
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, ast.USub | ast.UAdd | ast.Not):
            raise ExprError(f"operator {type(node.op).__name__} is not allowed")
        _check(node.operand, depth + 1)
        return
    if isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _CMPOPS:
                raise ExprError(f"comparison {type(op).__name__} is not allowed")
        for sub in [node.left, *node.comparators]:
            _check(sub, depth + 1)
        return
    if isinstance(node, ast.BoolOp):
        for sub in node.values:
            _check(sub, depth + 1)
        return
    if isinstance(node, ast.IfExp):
        for sub in (node.test, node.body, node.orelse):
            _check(sub, depth + 1)
        return
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            what = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            raise ExprError(f"function '{what}' is not allowed (allowed: {', '.join(FUNCTIONS)})")
        if node.keywords:
            raise ExprError("keyword arguments are not allowed")
        lo, hi = ARITY[node.func.id]
        if not lo <= len(node.args) <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            raise ExprError(f"{node.func.id}() takes {want} argument(s), got {len(node.args)}")
        for sub in node.args:
            if isinstance(sub, ast.Starred):
                raise ExprError("starred arguments are not allowed")
            _check(sub, depth + 1)
        return
    raise ExprError(f"{type(node).__name__} is not allowed in an expression")


def names(text: str) -> set[str]:
    """The free names an expression uses (functions excluded)."""
    tree = parse(text)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in FUNCTIONS}


def evaluate(text: str | int | float | bool, env: Mapping[str, int | float | bool]):
    """Evaluate an expression (or pass a plain number through) with the names in ``env``."""
    if isinstance(text, bool | int | float):
        return text
    if not isinstance(text, str):
        raise ExprError(f"expected an expression string, got {type(text).__name__}")
    return _compiled(text)(env)


# Loading a study evaluates its few expressions over every size and tuning point, tens of
# thousands of times: each text becomes, once, a tree of closures that computes exactly what
# a walk of the tree would (the same checks, in the same order), without a dispatch per node.
@functools.lru_cache(maxsize=8192)
def _compiled(text: str):
    return _closure(parse(text).body)


def _closure(node: ast.AST):
    if isinstance(node, ast.Constant):
        value = _bounded(node.value)
        return lambda env: value
    if isinstance(node, ast.Name):
        if node.id in ("True", "False"):
            truth = node.id == "True"
            return lambda env: truth
        name = node.id

        def lookup(env):
            if name not in env:
                known = ", ".join(sorted(env)) or "none"
                raise ExprError(f"unknown name '{name}' (known: {known})")
            return env[name]

        return lookup
    if isinstance(node, ast.BinOp):
        left, right, op = _closure(node.left), _closure(node.right), type(node.op)
        fn = _BINOPS[op]
        is_pow = op is ast.Pow
        is_div = op in (ast.Div, ast.FloorDiv, ast.Mod)

        def binop(env):
            a, b = left(env), right(env)
            if is_pow and _pow_too_large(a, b):
                raise ExprError(f"power {a}**{b} is too large")
            if is_div and b == 0:
                raise ExprError("division by zero")
            if is_pow and a == 0 and b < 0:
                raise ExprError("zero to a negative power")
            if is_pow and a < 0 and not float(b).is_integer():
                raise ExprError(f"({a})**{b} is not a real number")
            try:
                return _bounded(fn(a, b))
            except (ZeroDivisionError, OverflowError) as e:
                raise ExprError(str(e)) from None

        return binop
    if isinstance(node, ast.UnaryOp):
        operand = _closure(node.operand)
        if isinstance(node.op, ast.Not):
            return lambda env: not operand(env)
        if isinstance(node.op, ast.USub):
            return lambda env: -operand(env)
        return lambda env: +operand(env)
    if isinstance(node, ast.Compare):
        first = _closure(node.left)
        rest = [
            (_CMPOPS[type(op)], _closure(c))
            for op, c in zip(node.ops, node.comparators, strict=True)
        ]

        def compare(env):
            a = first(env)
            for cmp, comp in rest:
                b = comp(env)
                if not cmp(a, b):
                    return False
                a = b
            return True

        return compare
    if isinstance(node, ast.BoolOp):
        parts = [_closure(v) for v in node.values]
        if isinstance(node.op, ast.And):
            return lambda env: all(p(env) for p in parts)
        return lambda env: any(p(env) for p in parts)
    if isinstance(node, ast.IfExp):
        test, body, orelse = _closure(node.test), _closure(node.body), _closure(node.orelse)
        return lambda env: body(env) if test(env) else orelse(env)
    if isinstance(node, ast.Call):
        fn = FUNCTIONS[node.func.id]
        args = [_closure(a) for a in node.args]
        return lambda env: _bounded(fn(*(a(env) for a in args)))
    raise ExprError(f"{type(node).__name__} is not allowed")  # unreachable after _check


def _pow_too_large(base, exp) -> bool:
    if abs(exp) > MAX_EXPONENT:
        return True
    return abs(base) > 1 and exp > 0 and exp * math.log2(abs(base)) > 63


def _bounded(value):
    if isinstance(value, complex):
        raise ExprError(f"value {value} is not a real number")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MAX_MAGNITUDE:
        raise ExprError(f"value {value} is out of range")
    if isinstance(value, float) and not math.isfinite(value):
        raise ExprError(f"value {value} is not finite")
    return value


def evaluate_int(text, env) -> int:
    """Evaluate and require a whole number (launch dimensions, sizes, shared memory)."""
    value = evaluate(text, env)
    if isinstance(value, bool):
        raise ExprError(f"expected an integer, got {value}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ExprError(f"expected an integer, got {value}")
        value = int(value)
    return _bounded(value)
