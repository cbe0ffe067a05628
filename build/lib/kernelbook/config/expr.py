"""Safe evaluation of the small expressions a study config may hold.

Launch geometry (``grid: [cdiv(N, BN), cdiv(M, BM)]``), constraints (``M % BM == 0``) and
derived sizes (``N: M``) are written as Python-like expressions. They are parsed with
:mod:`ast` and walked here; nothing is handed to ``eval``. Allowed: integer and float
literals, ``True``/``False``, names given by the caller, ``+ - * / // % **``, unary ``- + not``,
comparisons (chains too), ``and``/``or``, ``x if c else y``, and the functions ``cdiv``,
``min``, ``max``, ``abs``, ``log2``, ``is_pow2``. Anything else (attributes, subscripts,
lambdas, strings, calls to other functions) is rejected with :class:`ExprError`.
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
    tree = parse(text)
    return _eval(tree.body, env)


def _eval(node: ast.AST, env):
    if isinstance(node, ast.Constant):
        return _bounded(node.value)
    if isinstance(node, ast.Name):
        if node.id in ("True", "False"):
            return node.id == "True"
        if node.id not in env:
            known = ", ".join(sorted(env)) or "none"
            raise ExprError(f"unknown name '{node.id}' (known: {known})")
        return env[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env), _eval(node.right, env)
        if isinstance(node.op, ast.Pow) and _pow_too_large(left, right):
            raise ExprError(f"power {left}**{right} is too large")
        if isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod) and right == 0:
            raise ExprError("division by zero")
        if isinstance(node.op, ast.Pow) and left == 0 and right < 0:
            raise ExprError("zero to a negative power")
        if isinstance(node.op, ast.Pow) and left < 0 and not float(right).is_integer():
            raise ExprError(f"({left})**{right} is not a real number")
        try:
            return _bounded(_BINOPS[type(node.op)](left, right))
        except (ZeroDivisionError, OverflowError) as e:
            raise ExprError(str(e)) from None
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env)
        if isinstance(node.op, ast.Not):
            return not value
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = _eval(comp, env)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(v, env) for v in node.values)
        return any(_eval(v, env) for v in node.values)
    if isinstance(node, ast.IfExp):
        return _eval(node.body, env) if _eval(node.test, env) else _eval(node.orelse, env)
    if isinstance(node, ast.Call):
        args = [_eval(a, env) for a in node.args]
        return _bounded(FUNCTIONS[node.func.id](*args))
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
