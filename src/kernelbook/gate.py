"""The bench gate: what failed in a study, and whether it was meant to.

A variant that fails to compile, launch, check or finish is recorded as ``failed`` rows
(with the ``failure`` kind and the message) so the study's tables and page are still made;
this gate then fails the run, at its end, with one line per failure. Negative controls
(variants declaring ``expect:``) pass when they fail the way they declare, and fail the
gate when they pass or fail otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

# How a failed row failed (the ``failure`` column of the measurements and profile tables).
FAILURE_KINDS = (
    "compile",  # nvcc failed or ran out of time; nothing of the variant could run
    "launch",  # the cubin could not be loaded or launched (missing entry, smem opt-in)
    "wrong",
    "nonfinite",
    "out_of_bounds",
    "input_modified",
    "crash",  # a CUDA error during or after the launch (the context is lost)
    "hang",  # a launch, or a tool (ncu, compute-sanitizer), ran past its time limit
    "no_winner",  # an autotuned variant none of whose candidates ran correctly
    "tool",  # a profiler or sanitizer run failed for another reason
)
# What a negative control's `expect` means at the bench: the kind its rows must fail with.
# (race is the sanitizer's to catch: its bench rows may pass or fail.)
BENCH_CAUGHT = frozenset({"wrong", "nonfinite", "out_of_bounds", "crash", "hang"})
# ... and to compute-sanitizer: the tool that must report it (else the sanitize gate fails).
SANITIZER_CAUGHT = {"out_of_bounds": "memcheck", "race": "racecheck"}
MAX_LINES = 30  # one screen


@dataclass(frozen=True)
class Failure:
    study: str
    variant: str
    size: str
    stage: str  # compile, bench, profile
    kind: str
    message: str
    expected: bool

    def line(self, width: int = 200) -> str:
        """One line: where, stage, kind, and the message's first line (for a compile
        failure, nvcc's first error line too), without repeating the kind or the variant."""
        lines = [x.strip() for x in str(self.message or "").splitlines() if x.strip()]
        first = lines[0] if lines else ""
        for prefix in (f"{self.kind}: ", f"{self.study}/{self.variant}: "):
            first = first.removeprefix(prefix)
        error = next((x for x in lines[1:] if "error" in x.lower()), None)
        if error and self.kind == "compile":
            first = f"{first} {error.rsplit('/', 1)[-1]}"
        head = f"{self.study}/{self.variant} {self.size} [{self.stage}] {self.kind}: "
        msg = " ".join(first.split())
        room = max(40, width - len(head))
        return head + (msg if len(msg) <= room else msg[: room - 3] + "...")


def failure_kind(row) -> str:
    kind = row.get("failure")
    if isinstance(kind, str) and kind:
        return kind
    # rows written before the failure column: the reason starts with the kind
    reason = str(row.get("reason") or "")
    head = reason.split(":", 1)[0].strip()
    return head if head in FAILURE_KINDS else "failed"


def _rows(df: pd.DataFrame | None):
    if df is None or df.empty or "status" not in df.columns:
        return []
    return [r for _, r in df.iterrows()]


def failures(
    study: str,
    expects: Mapping[str, str | None],
    build: pd.DataFrame | None = None,
    measurements: pd.DataFrame | None = None,
    profile: pd.DataFrame | None = None,
    sanitizer: pd.DataFrame | None = None,
) -> list[Failure]:
    """Every failure of a study's declared variants, expected or not, in table order.

    ``expects`` maps each declared variant to its ``expect`` (None for an ordinary one).
    Autotuning candidates are left out: tuning tolerates failed points, and a tuned
    variant none of whose candidates ran is itself a failed (no_winner) row.
    With measurements, a compile failure is read from its bench rows (kind compile);
    without (no GPU), from the build table. The sanitizer table's findings, hangs and
    failed runs are failures too (stage ``sanitize``; ``known`` findings are explained, a
    ``not_run`` row is the bench gate's), and a control whose ``expect`` a tool must catch
    (SANITIZER_CAUGHT) is one when that tool finds nothing.
    """
    out: list[Failure] = []
    if measurements is None:
        for r in _rows(build):
            if r["status"] == "failed" and not isinstance(r.get("tuned_from"), str):
                v = r["variant"]
                out.append(Failure(study, v, "-", "compile", "compile", r["reason"], False))
    for r in _rows(measurements):
        if r.get("variant_kind") == "candidate" or r["status"] == "skipped":
            continue
        v, size = r["variant"], r["size"]
        expect = expects.get(v)
        if r["status"] == "failed":
            kind = failure_kind(r)
            ok = expect is not None and (expect not in BENCH_CAUGHT or kind == expect)
            msg = r["reason"]
            if expect is not None and not ok:
                msg = f"declared expect: {expect}, but failed as {kind}: {msg}"
            out.append(Failure(study, v, size, "bench", kind, msg, ok))
        elif r["status"] == "ok" and expect in BENCH_CAUGHT:
            out.append(
                Failure(
                    study,
                    v,
                    size,
                    "bench",
                    "passed",
                    f"declared expect: {expect} (a negative control), but it passed its check",
                    False,
                )
            )
    for r in _rows(profile):
        # the baseline's rows (profiled beside the variants, for comparison) are not the
        # study's to fail: a failed one is shown where the page uses it
        if r["status"] != "failed" or r["variant"] not in expects:
            continue
        v = r["variant"]
        out.append(
            Failure(
                study,
                v,
                r["size"],
                "profile",
                failure_kind(r),
                r["reason"],
                expects.get(v) is not None,
            )
        )
    out += _sanitizer_failures(study, expects, sanitizer)
    return out


def _sanitizer_failures(study: str, expects: Mapping[str, str | None], table) -> list[Failure]:
    out = []
    rows = [] if table is None or table.empty else [r for _, r in table.iterrows()]
    for r in rows:
        v, expect, tool = r["variant"], expects.get(r["variant"]), r["tool"]
        verdict = r["verdict"]
        if verdict in ("findings", "hang", "failed"):
            what = {
                "findings": f"reports {r['errors']} error(s), {r['warnings']} warning(s)",
                "hang": "ran out of time",
                "failed": "failed",
            }[verdict]
            kind = {"findings": "findings", "hang": "hang", "failed": "tool"}[verdict]
            msg = f"{tool} {what}: {r['first_finding'] or 'see its log'}"
            out.append(Failure(study, v, r["size"], "sanitize", kind, msg, expect is not None))
        elif SANITIZER_CAUGHT.get(expect) == tool and verdict in ("clean", "not_run"):
            msg = f"declared expect: {expect} (a negative control), but {tool} " + (
                "found nothing" if verdict == "clean" else "did not run"
            )
            out.append(Failure(study, v, r["size"], "sanitize", "passed", msg, False))
    return out


def summary(study: str, found: list[Failure], tables: str = "") -> str:
    """The gate's message: unexpected failures first, one line each, within one screen."""
    bad = [f for f in found if not f.expected]
    good = [f for f in found if f.expected]
    head = (
        f"{study}: {len(bad)} unexpected failure(s)"
        + (f", {len(good)} expected (negative controls)" if good else "")
        + (f"; the rows are in {tables}" if tables else "")
    )
    lines = [f.line() for f in bad[:MAX_LINES]]
    if len(bad) > MAX_LINES:
        lines.append(f"... and {len(bad) - MAX_LINES} more")
    return head + ("\n  " + "\n  ".join(lines) if lines else "")


class GateFailed(RuntimeError):
    """A study has failures its config does not declare (``expect:``)."""


def gate_job(study, out, build=None, measurements=None, profile=None) -> int:
    """The bench gate (or, without a GPU, the build gate) of one study: ``out`` is written
    when every failure is one its config expects, else GateFailed says what failed."""
    from pathlib import Path

    from kernelbook import tables

    def read(path):
        return tables.read(path) if path else None

    found = failures(
        study.name,
        study.expects(),
        build=read(build),
        measurements=read(measurements),
        profile=read(profile),
    )
    text = summary(study.name, found, measurements or build)
    if any(not f.expected for f in found):
        raise GateFailed(text)
    expected = [f for f in found if f.expected]
    said = f"{study.name}: no unexpected failures"
    if expected:
        said += f"; {len(expected)} expected failure(s) of negative controls:\n  "
        said += "\n  ".join(f.line() for f in expected)
    Path(out).write_text(said + "\n")
    print(said, file=sys.stderr, flush=True)
    return 0
