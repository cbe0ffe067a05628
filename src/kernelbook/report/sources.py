"""Which tables a study's page is made from: a run's results/ when measured here, else the
study's published data/ in worklogs/ (rendered again, not re-measured)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kernelbook.layout import published, published_paths, result_paths
from kernelbook.report.data import measured_dates

REQUIRED = ("measurements", "device", "build", "sass", "meta")
OPTIONAL = ("profile", "roofline", "sanitizer", "samples", "stages", "loops")
# Read by the page only, not by a study's own figures notebook: the stages table holds the
# time of the study_figures job, so it cannot be that job's input.
PAGE_ONLY = ("samples", "stages", "loops")


def _optional(page: bool) -> tuple[str, ...]:
    return OPTIONAL if page else tuple(n for n in OPTIONAL if n not in PAGE_ONLY)


def measured_tables(
    results: str | Path,
    gpu: str,
    study: str,
    page: bool = False,
    made: Callable[[str], bool] = lambda path: False,
) -> dict[str, str]:
    """The tables of a study measured here: the required ones, and each optional one that
    ``made`` says a rule makes or that is already there (profile and sanitize may be absent).
    With ``page``, also the tables the page reads and a study's own figures do not."""
    paths = result_paths(results, gpu, study)
    named = {k: str(paths[k]) for k in REQUIRED}
    for name in _optional(page):
        if made(str(paths[name])) or paths[name].is_file():
            named[name] = str(paths[name])
    return named


def published_tables(
    worklogs: str | Path, gpu: str, study: str, page: bool = False
) -> dict[str, str]:
    """The tables of a published study that are there: only the measurements are required
    (older publications may lack a table; the page then says what it could not show)."""
    paths = published_paths(worklogs, gpu, study)
    named = {"measurements": str(paths["measurements"])}
    for name in (*REQUIRED, *_optional(page)):
        if name != "measurements" and paths[name].is_file():
            named[name] = str(paths[name])
    return named


def replay_note(worklogs: str | Path) -> str:
    """One line naming the published worklogs rendered without measuring ("" when none)."""
    pairs = published(worklogs)
    if not pairs:
        return ""
    when = []
    for g, s in pairs:
        lo, hi = measured_dates(published_paths(worklogs, g, s)["measurements"])
        when.append(f"{g}/{s} (measured {lo}{'' if hi == lo else ' to ' + hi})")
    return (
        f"kernelbook: rendering {len(pairs)} published worklog(s) from {worklogs}/ "
        f"(measured elsewhere, not re-measured here): {', '.join(when)}"
    )
