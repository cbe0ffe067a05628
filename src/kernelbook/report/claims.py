"""What each step claims about its speed (a variant's ``claims:`` in its study config, carried
by study.json) against the verdict the page measured at the headline size: the read-first
list names every claim the interval does not bear out, and each step's section says how its
claims fared.

A claim is {against: verdict}: against 'previous' (the step before it: the last variant
above it measured ok at the headline size, as in the ladder's "vs previous"), 'baseline'
(the study's first baseline) or another variant's id; the verdict is faster, same or
slower (kernelbook.report.compare.verdict, on the bootstrap interval of the speed ratio).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelbook.report.data import variant_info
from kernelbook.report.markdown import fmt

PHRASE = {"faster": "faster than {}", "slower": "slower than {}", "same": "the same speed as {}"}


@dataclass(frozen=True)
class Check:
    """One claim of one step, and what the measurement said of it."""

    variant: str
    against: str  # as the config says it: previous, baseline or a variant id
    ref: str | None  # what it was compared with (the previous step's id, the baseline's name)
    claimed: str  # faster, same or slower
    got: str | None  # the verdict (compare.VERDICTS); None: not checked, ``why`` says why
    interval: tuple[float, float, float] | None = None  # speed ratio (point, lo, hi)
    why: str = ""

    @property
    def held(self) -> bool:
        return self.got == self.claimed

    def phrase(self) -> str:
        """'faster than 02_fused_block', 'the same speed as cuBLAS (the baseline)'."""
        if self.ref is None:
            ref = "the step before it"
        elif self.against == "baseline":
            ref = f"{self.ref} (the baseline)"
        else:
            ref = self.ref
        return PHRASE[self.claimed].format(ref)

    def measured(self, bold: bool = False) -> str:
        """'same (1.005x, interval [1.004, 1.007])', the verdict in bold with ``bold``."""
        p, lo, hi = self.interval or (None, None, None)
        got = f"**{self.got}**" if bold else self.got
        return f"{got} ({fmt(p)}x, interval [{fmt(lo)}, {fmt(hi)}])"


def claims_of(data, v: str) -> dict[str, str]:
    """A variant's claims from study.json ({} for a study.json written before the key)."""
    return dict(variant_info(data, v).get("claims") or {})


def named(data, order: list[str]) -> dict[str, list[str]]:
    """variant -> the other variants its claims name (compare.ladder_intervals' against)."""
    out = {}
    for v in order:
        refs = [r for r in claims_of(data, v) if r not in ("previous", "baseline")]
        if refs:
            out[v] = refs
    return out


def checks(data, order: list[str], cis: dict, head, base: str, size: str) -> list[Check]:
    """Every claim of the steps measured ok at the headline size (``head``), checked
    against the ladder's intervals (``cis``: compare.ladder_intervals, with ``named``)."""
    out = []
    for v in order:
        got = cis.get(v)
        if not got:  # not measured ok here: the page lists why; nothing to check
            continue
        for against, claimed in claims_of(data, v).items():
            if against == "previous":
                prev = got.get("prev")
                if prev is None:
                    why = f"no step before it was measured ok at {size}"
                    out.append(Check(v, against, None, claimed, None, why=why))
                    continue
                out.append(Check(v, against, prev, claimed, got["vs_previous"], got["previous"]))
            elif against == "baseline":
                out.append(Check(v, against, base, claimed, got["vs_baseline"], got["baseline"]))
            elif against in got.get("named", {}):
                ci, verdict = got["named"][against]
                out.append(Check(v, against, against, claimed, verdict, ci))
            else:
                why = f"{against} was not measured ok at {size}"
                out.append(Check(v, against, against, claimed, None, why=why))
    return out


def notes(found: list[Check], size: str) -> list[str]:
    """Read-first bullets: each claim that its interval does not bear out, or that cannot be
    checked."""
    out = []
    for c in found:
        if c.held:
            continue
        if c.got is None:
            out.append(f"**{c.variant}** claims to be {c.phrase()}; not checked: {c.why}.")
            continue
        p, lo, hi = c.interval
        out.append(
            f"**{c.variant}** claims to be {c.phrase()}, but at {size} its speed against it "
            f"is {fmt(p)}x, interval [{fmt(lo)}, {fmt(hi)}]: **{c.got}**."
        )
    return out


def section_lines(found: list[Check], v: str, size: str) -> list[str]:
    """A step's 'Claims at SIZE.' paragraph (none when it claims nothing)."""
    mine = [c for c in found if c.variant == v]
    if not mine:
        return []
    parts = []
    for c in mine:
        what = c.phrase()
        what = what[0].upper() + what[1:]
        if c.got is None:
            parts.append(f"{what}: not checked, {c.why}.")
        elif c.held:
            parts.append(f"{what}: measured {c.measured()}, as claimed.")
        else:
            parts.append(f"{what}: measured {c.measured(bold=True)}, not as claimed.")
    return [f"**Claims at {size}.** " + " ".join(parts), ""]
