"""A study's sizes: size groups expanded (lists sweep, strings derive) and checked."""

from __future__ import annotations

import itertools

from kernelbook.config import expr
from kernelbook.config.schema import ConfigError


def expand_sizes(
    groups: list[dict], names: tuple[str, ...], where: str, zero_ok=()
) -> list[dict[str, int]]:
    """Expand size groups (lists sweep, several lists multiply, strings derive) in order."""
    out: list[dict[str, int]] = []
    for gi, group in enumerate(groups):
        gwhere = f"{where}[{gi}]"
        fixed = {k: v for k, v in group.items() if not isinstance(v, str)}
        derived = {k: v for k, v in group.items() if isinstance(v, str)}
        keys = list(fixed)
        lists = [v if isinstance(v, list) else [v] for v in fixed.values()]
        for combo in itertools.product(*lists):
            out.append(
                _complete_size(
                    {**dict(zip(keys, combo, strict=True)), **derived}, names, gwhere, zero_ok
                )
            )
    unique: list[dict[str, int]] = []
    for s in out:
        if s not in unique:
            unique.append(s)
    return unique


def _complete_size(group: dict, names: tuple[str, ...], where: str, zero_ok=()) -> dict[str, int]:
    """A size group completed (derived names evaluated); every value positive, except the
    names in ``zero_ok`` (a problem's flags, such as attention's causal), which may be 0."""
    if not isinstance(group, dict):
        raise ConfigError(f"{where}: expected a mapping of size names")
    unknown = set(group) - set(names)
    if unknown:
        raise ConfigError(
            f"{where}: unknown size name(s) {', '.join(sorted(unknown))} (this problem has "
            f"{', '.join(names)})"
        )
    values = {k: v for k, v in group.items() if not isinstance(v, str)}
    pending = {k: v for k, v in group.items() if isinstance(v, str)}
    for k, v in values.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if k in zero_ok else 1):
            raise ConfigError(f"{where}: {k}: expected a positive integer, got {v!r}")
    while pending:
        progress = False
        for k, text in list(pending.items()):
            try:
                used = expr.names(text)
            except expr.ExprError as e:
                raise ConfigError(f"{where}: {k}: '{text}': {e}") from None
            if used <= set(values):
                try:
                    values[k] = expr.evaluate_int(text, values)
                except expr.ExprError as e:
                    raise ConfigError(f"{where}: {k}: '{text}': {e}") from None
                if values[k] < (0 if k in zero_ok else 1):
                    raise ConfigError(f"{where}: {k}: '{text}' gives {values[k]}, not positive")
                del pending[k]
                progress = True
        if not progress:
            k, text = next(iter(pending.items()))
            missing = expr.names(text) - set(values)
            raise ConfigError(f"{where}: {k}: '{text}' uses undefined {', '.join(sorted(missing))}")
    missing = [n for n in names if n not in values]
    if missing:
        raise ConfigError(f"{where}: missing size name(s) {', '.join(missing)}")
    return {n: values[n] for n in names}
