"""Every number and cell as a page shows it: four significant digits, escaped text, Markdown
tables, and those tables read back."""

from __future__ import annotations

import json
import math
import re

import pandas as pd

DASH = "—"


def isnull(x) -> bool:
    if x is None or x is pd.NA:
        return True
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def is_true(x) -> bool:
    return not isnull(x) and bool(x)


def as_float(x) -> float | None:
    return None if isnull(x) else float(x)


def distinct(df: pd.DataFrame, col: str) -> str:
    if df is None or col not in df:
        return ""
    vals = [str(v) for v in dict.fromkeys(df[col].dropna()) if str(v) != ""]
    return ", ".join(vals)


def fmt(x, digits: int = 4) -> str:
    """A number as the page shows it: four significant digits, DASH for none."""
    if x is None or x is pd.NA:
        return DASH
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(v):
        return DASH
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if 10**digits <= abs(v) < 1e6:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


def esc(text) -> str:
    """Text safe inside a Markdown table cell or bullet."""
    if isnull(text):
        return ""
    return (
        str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("*", "\\*")
    )


def inline_code(text) -> str:
    return str(text).replace("`", "'").replace("\n", " ")[:300]


def md_table(headers: list[str], rows: list[list[str]], align: str = "") -> str:
    """A GitHub Markdown table; align: one 'l' or 'r' per column (default: r but the first)."""
    align = align or "l" + "r" * (len(headers) - 1)
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def point_label(text) -> str:
    if not isinstance(text, str) or not text:
        return ""
    try:
        point = json.loads(text)
    except json.JSONDecodeError:
        return text
    return " ".join(f"{k}{v}" for k, v in point.items())


def parse_tables(md_text: str) -> list[list[dict[str, str]]]:
    """Every Markdown table of a page, as lists of {header: cell}."""
    out, cur, heads = [], None, None
    for line in md_text.splitlines():
        if line.startswith("|") and line.rstrip().endswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if heads is None:
                heads, cur = cells, []
            elif all(re.fullmatch(r":?-+:?", c) for c in cells):
                continue
            else:
                cur.append(dict(zip(heads, cells, strict=False)))
        elif heads is not None:
            out.append(cur)
            cur, heads = None, None
    if heads is not None:
        out.append(cur)
    return out
