"""kernelbook.config.expr: the safe evaluator behind grid, block, smem, requires, sizes."""

from __future__ import annotations

import pytest

from kernelbook.config import expr
from kernelbook.config.expr import ExprError, evaluate, evaluate_int

ENV = {"M": 1000, "N": 3000, "K": 7, "BS": 32, "BM": 128, "BN": 64}


# ------------------------------------------------------------------------------------------
# What it computes


@pytest.mark.parametrize(
    "text, value",
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 - 10", -3),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 % 3", 1),
        ("2 ** 10", 1024),
        ("2 ** 62", 2**62),
        ("-BS", -32),
        ("+BS", 32),
        ("M * N * K", 1000 * 3000 * 7),
        ("1.5 * 2", 3.0),
        ("M // BS + (M % BS > 0)", 32),
    ],
)
def test_arithmetic(text, value):
    result = evaluate(text, ENV)
    assert result == value
    assert type(result) is type(value)


@pytest.mark.parametrize(
    "text, value",
    [
        ("M == 1000", True),
        ("M != 1000", False),
        ("M < N", True),
        ("M <= 1000", True),
        ("M > N", False),
        ("M >= 1001", False),
        ("1 < 2 < 3", True),
        ("1 < 3 < 2", False),
        ("3 > 2 > 2", False),
        ("K < BS <= M < N", True),
        ("M % BS == 0", False),
        ("N % 4 == 0 and K % 4 == 0", False),
        ("N % 4 == 0 or K % 4 == 0", True),
        ("not M % BS == 0", True),
        ("not (M < N)", False),
        ("True and not False", True),
        ("M < N and (K > 100 or BS == 32)", True),
    ],
)
def test_comparisons_and_logic(text, value):
    assert evaluate(text, ENV) is value


def test_comparison_chain_short_circuits():
    # the chain stops at the first false link: later links are not evaluated
    assert evaluate("2 < 1 < 1 // 0", {}) is False
    with pytest.raises(ExprError, match="division by zero"):
        evaluate("1 < 2 < 1 // 0", {})


@pytest.mark.parametrize(
    "text, value",
    [
        ("BM if M > N else BN", 64),
        ("BM if M < N else BN", 128),
        ("1 if 0 else 2 if 0 else 3", 3),
    ],
)
def test_conditional_expressions(text, value):
    assert evaluate(text, ENV) == value


@pytest.mark.parametrize(
    "text, value",
    [
        ("cdiv(M, BS)", 32),
        ("cdiv(N, BS)", 94),
        ("cdiv(1024, 32)", 32),
        ("cdiv(1, 32)", 1),
        ("cdiv(0, 32)", 0),
        ("cdiv(-5, 2)", -2),
        ("min(M, N)", 1000),
        ("min(M, N, K)", 7),
        ("max(M, N)", 3000),
        ("max(BM, BN) // min(BM, BN)", 2),
        ("abs(K - M)", 993),
        ("log2(1024)", 10),
        ("log2(1)", 0),
        ("log2(BM)", 7),
        ("is_pow2(BM)", True),
        ("is_pow2(M)", False),
        ("is_pow2(1)", True),
        ("is_pow2(0)", False),
        ("is_pow2(-4)", False),
        ("BM * BN // (8 * 8)", 128),
    ],
)
def test_functions(text, value):
    assert evaluate(text, ENV) == value


@pytest.mark.parametrize("text", ["log2(1000)", "log2(0)", "log2(-8)", "log2(2.0)"])
def test_log2_requires_a_power_of_two_integer(text):
    with pytest.raises(ExprError, match="log2"):
        evaluate(text, {})


@pytest.mark.parametrize("text", ["cdiv(M, 0)", "cdiv(1.5, 2)", "cdiv(True, 2)"])
def test_cdiv_rejects_zero_and_non_integers(text):
    with pytest.raises(ExprError, match="cdiv"):
        evaluate(text, ENV)


def test_plain_numbers_pass_through():
    assert evaluate(32, {}) == 32
    assert evaluate(1.5, {}) == 1.5
    assert evaluate(True, {}) is True


def test_evaluate_int():
    assert evaluate_int("cdiv(M, BS) * BS", ENV) == 1024
    assert evaluate_int("M / 8", ENV) == 125
    assert type(evaluate_int("M / 8", ENV)) is int
    assert evaluate_int(64, {}) == 64
    with pytest.raises(ExprError, match="integer"):
        evaluate_int("M / 3", ENV)
    with pytest.raises(ExprError, match="integer"):
        evaluate_int("M > 0", ENV)
    with pytest.raises(ExprError, match="integer"):
        evaluate_int(True, {})


def test_names_returns_the_free_names():
    assert expr.names("cdiv(N, BN) * max(M, BS) + K") == {"N", "BN", "M", "BS", "K"}
    assert expr.names("BM if is_pow2(BM) else BN") == {"BM", "BN"}
    assert expr.names("1 + 2") == set()
    assert expr.names("True or False") == set()
    with pytest.raises(ExprError):
        expr.names("__import__('os')")


def test_unknown_name_lists_known_names():
    with pytest.raises(ExprError) as e:
        evaluate("cdiv(N, TILE)", {"N": 1, "BS": 2, "M": 3})
    msg = str(e.value)
    assert "TILE" in msg
    assert "known: BS, M, N" in msg


def test_unknown_name_with_empty_env():
    with pytest.raises(ExprError, match=r"unknown name 'x' \(known: none\)"):
        evaluate("x + 1", {})


@pytest.mark.parametrize("text", ["1 / 0", "1 // 0", "1 % 0", "M / (BS - 32)", "1.0 / 0.0"])
def test_division_by_zero(text):
    with pytest.raises(ExprError, match="division by zero"):
        evaluate(text, ENV)


# ------------------------------------------------------------------------------------------
# What it refuses


HOSTILE = [
    "__import__('os')",
    "__import__('os').system('true')",
    "().__class__",
    "().__class__.__bases__[0].__subclasses__()",
    "a.b",
    "M.bit_length()",
    "M.real",
    "x[0]",
    "[1, 2][0]",
    "(1, 2)",
    "[1, 2]",
    "{1: 2}",
    "{1, 2}",
    "lambda: 1",
    "(lambda: 1)()",
    "[i for i in (1, 2)]",
    "{i for i in (1, 2)}",
    "(i for i in (1, 2))",
    "'text'",
    "b'bytes'",
    "f'{M}'",
    "1j",
    "None",
    "...",
    "min(1, 2, key=abs)",
    "max(*(1, 2))",
    "open(1)",
    "eval('1')",
    "exec('1')",
    "getattr(1, 'real')",
    "int(1)",
    "globals()",
    "_",
    "_x + 1",
    "__builtins__",
    "(y := 1)",
    "1 << 70",
    "1 & 1",
    "~1",
    "M is N",
    "M in (1, 2)",
    "import os",
    "1; 2",
    "M = 1",
    "",
    "   ",
    "cdiv(1,",
    "max()",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_or_unsupported_input_rejected(text):
    env = {"a": 1, "x": 2, "M": 3, "N": 4, "y": 5}
    with pytest.raises(ExprError):
        evaluate(text, env)
    with pytest.raises(ExprError):
        expr.names(text)


def test_rejects_non_string_non_number():
    with pytest.raises(ExprError):
        evaluate(["1"], {})  # type: ignore[arg-type]
    with pytest.raises(ExprError):
        expr.parse(None)  # type: ignore[arg-type]


def test_unknown_function_message_lists_allowed_functions():
    with pytest.raises(ExprError) as e:
        evaluate("open(1)", {})
    assert "'open'" in str(e.value)
    for name in ("cdiv", "min", "max", "log2", "is_pow2"):
        assert name in str(e.value)


def test_underscore_names_rejected_even_when_in_env():
    with pytest.raises(ExprError, match="_secret"):
        evaluate("_secret", {"_secret": 1})


@pytest.mark.parametrize(
    "text",
    [
        "2**10000",
        "10**100",
        "9**9**9",
        "2**64",
        "2**63",
        "(-2)**65",
        "10**19",
        "2**-100",
        "1.5**1000",
        "1e300**2",
        "(2**40)**2",
    ],
)
def test_huge_powers_rejected(text):
    with pytest.raises(ExprError):
        evaluate(text, {})


@pytest.mark.parametrize(
    "text",
    [
        "4294967296 * 4294967296",
        "(2**62) * 2",
        "-(2**62) * 2",
        "(2**62) + (2**62)",
        "M * M * M * M * M * M * M",
        "1e308 * 10",
        "-1e308 * 10",
        "max(2**62, 1) * 4",
        "abs(-(2**62) - (2**62))",
    ],
)
def test_results_past_2_63_or_infinite_rejected(text):
    with pytest.raises(ExprError, match="range|finite"):
        evaluate(text, {"M": 1000})


def test_largest_values_in_range_accepted():
    assert evaluate("2**62 + (2**62 - 1)", {}) == 2**63 - 1
    assert evaluate("-(2**62) - (2**62 - 1)", {}) == -(2**63) + 1
    assert evaluate("(2**31)**2", {}) == 2**62


@pytest.mark.parametrize(
    "text",
    [
        "-" * 300 + "1",
        "not " * 100 + "1",
        "1" + " + 1" * 100,
        "1" + "**1" * 100,
        "-(" * 100 + "1" + ")" * 100,
        "min(" * 45 + "1" + ", 1)" * 45,
    ],
    ids=["unary", "not", "sum", "power", "unary-parens", "calls"],
)
def test_deep_nesting_is_an_expr_error_not_a_recursion_error(text):
    assert len(text) <= expr.MAX_LENGTH
    with pytest.raises(ExprError, match="deep"):
        evaluate(text, {})


def test_deeply_nested_parentheses_rejected():
    text = "(" * 200 + "1" + ")" * 200
    with pytest.raises(ExprError):
        evaluate(text, {})


def test_too_many_parentheses_for_python_is_an_expr_error():
    text = "(" * 240 + "1" + ")" * 240
    with pytest.raises(ExprError):
        evaluate(text, {})


def test_overlong_text_rejected():
    text = "1" + " + 1" * 200
    assert len(text) > expr.MAX_LENGTH
    with pytest.raises(ExprError, match="longer than"):
        evaluate(text, {})
    with pytest.raises(ExprError, match="longer than"):
        expr.names("M" * (expr.MAX_LENGTH + 1))


def test_syntax_error_is_an_expr_error():
    with pytest.raises(ExprError, match="not a valid expression"):
        evaluate("cdiv(N, BS", ENV)


# ------------------------------------------------------------------------------------------
# Known holes: each raises something other than ExprError today (or returns a non-number).


@pytest.mark.parametrize("text", ["0 ** -1", "0.0 ** -2"])
def test_zero_to_a_negative_power_is_an_expr_error(text):
    with pytest.raises(ExprError):
        evaluate(text, {})


def test_negative_base_fractional_power_is_an_expr_error():
    with pytest.raises(ExprError):
        evaluate("(-8) ** 0.5", {})
    with pytest.raises(ExprError):
        evaluate_int("(0 - M) ** 0.5", {"M": 4})


@pytest.mark.parametrize("text", ["min(5)", "max(M)", "abs(1, 2)", "cdiv(1)", "log2(4, 2)"])
def test_wrong_argument_count_is_an_expr_error(text):
    with pytest.raises(ExprError):
        evaluate(text, {"M": 3})


@pytest.mark.parametrize("text", ["99999999999999999999", "1e20"])
def test_huge_literals_rejected(text):
    with pytest.raises(ExprError):
        evaluate_int(text, {})
