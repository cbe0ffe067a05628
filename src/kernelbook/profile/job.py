"""One profile or sanitize job of a variant, the roofline table of a study, and the sanitizer
gate: what ran correctly in the bench is run again under ncu or compute-sanitizer."""

from __future__ import annotations

import sys
from pathlib import Path

from kernelbook import gate, gpu, problems, tables, tune
from kernelbook.config import ConfigError, Project, Study, Variant
from kernelbook.profile import ncu, roofline, sanitize


class SanitizerFindings(RuntimeError):
    """A study has sanitizer findings its config does not explain."""


def _eprint(*a):
    print(*a, file=sys.stderr, flush=True)


def targets(study: Study, variant: Variant, sizes, build_dir, cubin=None, tuned_table=None):
    """(variant to run, cubin, sizes) pairs; a tuned variant runs the candidate that won.
    ``build_dir`` may be None where ``cubin`` is given (a plain variant)."""
    if not variant.is_tuned:
        path = Path(cubin) if cubin else Path(build_dir) / variant.id / "kernel.cubin"
        return [(variant, path, sizes)]
    if not tuned_table:
        raise ConfigError(f"{study.name}/{variant.id} is autotuned: give --tuned-table")
    won = tune.winners(tables.read(tuned_table))
    problem = problems.get(study.problem)
    out = []
    for s in sizes:
        cand = tune.candidate_at(study, variant, won, s)
        if cand is None:
            _eprint(
                f"{study.name}/{variant.id}: no winning candidate at {problem.label(s)}; skipped"
            )
            continue
        out.append((study.variant(cand), Path(build_dir) / cand / "kernel.cubin", [s]))
    return out


def bench_failures(bench_table) -> dict[str, tuple[str, str]]:
    """Size label -> (kind, reason) of the sizes the variant's bench table records failed."""
    if not bench_table:
        return {}
    df = tables.read(bench_table)
    return {
        r["size"]: (gate.failure_kind(r), str(r["reason"]))
        for _, r in df.iterrows()
        if r["status"] == "failed"
    }


def _empty(table: str, study: Study):
    import pandas as pd

    return pd.DataFrame(columns=tables.schema(table, study.size_names).names)


def quick_sizes(study: Study, variant: Variant, labels, build_dir) -> list[dict] | None:
    """What `kernelbook profile --size` asks for, checked before anything runs: the sizes
    parsed (None: the study's profile sizes). An autotuned variant needs its build folder (its
    candidates' cubins) and tuned table. One ConfigError naming the variant otherwise."""
    if build_dir is None and variant.is_tuned:
        raise ConfigError(
            f"{study.name}/{variant.id} is autotuned: give --build-dir and --tuned-table, or "
            "profile one of its candidates"
        )
    if not labels:
        return None
    problem = problems.get(study.problem)
    try:
        return [problem.parse_size(label) for label in labels]
    except ValueError as e:
        raise ConfigError(f"{study.name}/{variant.id}: --size: {e}") from None


def profile_job(
    project: Project, study: Study, variant: Variant, out, reports, build_dir,
    cubin=None, tuned_table=None, bench_table=None, sizes=None,
) -> int:  # fmt: skip
    """ncu on ``variant`` at the study's profile sizes, or at ``sizes`` (quick_sizes)."""
    failed = bench_failures(bench_table)
    sizes = list(sizes or study.profile_sizes)

    def run(uuid):
        rows = []
        for r, path, run_sizes in targets(study, variant, sizes, build_dir, cubin, tuned_table):
            part = ncu.profile_variant(
                project, study, r, path, run_sizes, Path(reports), uuid, skip=failed
            )
            rows += [{**x, "variant": variant.id} for x in part]
        return rows

    return _profile_and_write(study, out, reports, run)


def _profile_and_write(study: Study, out, reports, run) -> int:
    """A profile job's GPU part, ``run(gpu uuid) -> rows``, under the GPU's lock (ncu's
    version asked before it is taken), then its table written without it."""
    ncu.ncu_version()  # a process of its own, asked before the GPU is taken
    slot = gpu.acquire_slot(preload=())
    Path(reports).mkdir(parents=True, exist_ok=True)  # the rule's output, even if none ran
    rows = run(slot.uuid)
    gpu.release_slot(slot)  # ncu's processes are gone: the rows are written without the GPU
    rows = [{**r, "job_startup_s": slot.startup_s, "job_wait_s": slot.wait_s} for r in rows]
    tables.write(rows or _empty("profile", study), out, "profile", study.size_names)
    return 0


def profile_study_job(
    project: Project, study: Study, out, reports, build_dir, bench_dir, tuned_dir, sizes=None,
    variants: list[Variant] | None = None, build_now=None,
) -> int:  # fmt: skip
    """ncu on ``variants`` (None: every variant of ``study``) in one run
    (ncu.profile_study), at the study's profile sizes or ``sizes`` (labels): each plain
    variant's cubin from ``build_dir``, less the sizes its bench failed at (its table in
    ``bench_dir``), each tuned variant through its winning candidates (its table in
    ``tuned_dir``). A missing table is one error naming it, before the GPU is taken.

    The quick loop, variants named and none of the three folders given: each compiled here
    first by ``build_now(project, study, variant, cubin path)`` (the caller's compiler,
    kernelbook.build.job.compile_now: this layer builds nothing; plain variants or
    candidates, a tuned one refused, naming it), then the same one run at every size (no
    bench table says what failed)."""
    problem = problems.get(study.problem)
    if sizes:
        try:
            sizes = [problem.parse_size(label) for label in sizes]
        except ValueError as e:
            raise ConfigError(f"{study.name}: --size: {e}") from None
    sizes = list(sizes or study.profile_sizes)
    if variants and build_now and not (build_dir or bench_dir or tuned_dir):
        return _profile_built_now(project, study, variants, out, reports, sizes, build_now)
    entries = []
    for v, table, failed in _study_entries(study, variants, bench_dir, tuned_dir, build_dir,
                                          "profile"):  # fmt: skip
        runs = targets(study, v, sizes, build_dir, tuned_table=table)  # a plain one: its cubin
        entries += [(v.id, run, path, run_sizes, failed) for run, path, run_sizes in runs]
    entries += baseline_entries(study, sizes)
    return _profile_and_write(
        study, out, reports,
        lambda uuid: ncu.profile_study(project, study, entries, Path(reports), uuid),
    )  # fmt: skip


def baseline_entries(study: Study, sizes) -> list[tuple]:
    """ncu.profile_study's entries for the study's profiled baselines at ``sizes`` (the
    primary, and each other one a target is held against: Study.profiled_baselines):
    profiled beside the variants (a baseline's rows' variant is BASELINE_PREFIX and its
    name), so that a page can set a step's profile against the library's at the same size."""
    from kernelbook.launch.process import BaselineRun

    runs = [BaselineRun(name) for name in study.profiled_baselines]
    return [(base.id, base, None, list(sizes), {}) for base in runs]


def _profile_built_now(project: Project, study: Study, variants, out, reports, sizes,
                       build_now) -> int:  # fmt: skip
    """profile_study_job's quick loop: ``variants`` compiled now by ``build_now``, into a
    folder of its own, then profiled in one ncu run at ``sizes``."""
    import tempfile

    tuned = [v.id for v in variants if v.is_tuned]
    if tuned:
        raise ConfigError(
            f"profile {study.name}: {', '.join(tuned)} autotuned: name its candidates, or give "
            "--build-dir, --bench-dir and --tuned-dir"
        )
    with tempfile.TemporaryDirectory() as tmp:
        entries = [
            (v.id, v, build_now(project, study, v, Path(tmp) / v.id / "kernel.cubin").cubin,
             sizes, {})
            for v in variants
        ] + baseline_entries(study, sizes)  # fmt: skip
        return _profile_and_write(
            study, out, reports,
            lambda uuid: ncu.profile_study(project, study, entries, Path(reports), uuid),
        )  # fmt: skip


def sanitize_job(
    project: Project, study: Study, variant: Variant, out, build_dir,
    cubin=None, tuned_table=None, bench_table=None,
) -> int:  # fmt: skip
    entries = _sanitize_entries(
        study, variant, bench_failures(bench_table), build_dir, cubin, tuned_table
    )
    return _sanitize_and_write(project, study, entries, out)


def _sanitize_entries(study: Study, variant: Variant, failed, build_dir, cubin=None,
                      tuned_table=None) -> list[tuple]:  # fmt: skip
    """sanitize.sanitize_study's entries for ``variant``: its cubin (a tuned variant's winner
    at the headline) at each of its sanitize sizes (Study.sanitize_sizes_for), with what its
    bench found failing (``failed``)."""
    lost = next(((k, r) for k, r in failed.values() if k in sanitize.NOT_RERUN), None)
    bad = next(iter(failed.values()), None)  # failed at some size: explained, not waited on
    if variant.is_tuned:
        headline = study.headline or study.profile_sizes[0]
        runs = targets(study, variant, [headline], build_dir, cubin, tuned_table)
    else:
        runs = targets(study, variant, [], build_dir, cubin, tuned_table)
    entries = []
    for run, path, _ in runs:
        sizes = study.sanitize_sizes_for(run)
        if not sizes:
            _eprint(f"{study.name}/{run.id}: no size it can run at; not sanitized")
        entries += [(variant.id, run, path, size, lost, bad, variant.expect) for size in sizes]
    return entries


def _sanitize_and_write(project: Project, study: Study, entries, out) -> int:
    """compute-sanitizer on ``entries`` under the GPU's lock, taken shared (the tools check,
    and time nothing), then the sanitizer table written without it."""
    slot = gpu.acquire_slot(preload=(), shared=True)
    rows = sanitize.sanitize_study(project, study, entries, slot.uuid, tools=study.sanitize_tools)
    gpu.release_slot(slot)  # compute-sanitizer's processes are gone
    tables.write(rows or _empty("sanitizer", study), out, "sanitizer", study.size_names)
    return 0


def _study_entries(study: Study, variants, bench_dir, tuned_dir, build_dir, what: str):
    """(variant, its bench or tuned table, the sizes its bench failed at) for each of
    ``variants`` (None: the study's), the folders and tables checked first: one ConfigError
    naming what is missing, before the GPU is taken."""
    variants = list(study.variants if variants is None else variants)
    need = {"--build-dir": build_dir, "--bench-dir": bench_dir}
    if any(v.is_tuned for v in variants):
        need["--tuned-dir"] = tuned_dir
    missing = [k for k, v in need.items() if not v]
    if missing:
        raise ConfigError(f"{what} {study.name}: give {', '.join(missing)}")
    out = []
    for v in variants:
        table = Path(tuned_dir if v.is_tuned else bench_dir) / f"{v.id}.parquet"
        if not table.is_file():
            kind = "tuned" if v.is_tuned else "bench"
            raise ConfigError(f"{study.name}/{v.id}: no {kind} table at {table}")
        out.append((v, table, {} if v.is_tuned else bench_failures(table)))
    return out


def sanitize_study_job(
    project: Project, study: Study, out, build_dir, bench_dir, tuned_dir,
    variants: list[Variant] | None = None,
) -> int:  # fmt: skip
    """compute-sanitizer's tools on ``variants`` (None: every variant of ``study``), each tool
    in one process for all of them where it finds nothing (sanitize.sanitize_study): plain
    variants from ``build_dir`` less what their bench (``bench_dir``) found failing, tuned
    ones through the winner at the headline (``tuned_dir``)."""
    entries = []
    for v, table, failed in _study_entries(study, variants, bench_dir, tuned_dir, build_dir,
                                          "sanitize"):  # fmt: skip
        entries += _sanitize_entries(study, v, failed, build_dir, tuned_table=table)
    return _sanitize_and_write(project, study, entries, out)


def roofline_job(study: Study, profile, out, measurements=None, device=None) -> int:
    prof = tables.read(profile)
    meas = tables.read(measurements) if measurements else None
    dev = tables.read(device) if device else None
    problem = problems.get(study.problem)
    table = roofline.roofline(
        prof, meas, dev, study.size_names, problem.flops, tensor_flops=problem.peak != "fp32"
    )
    if table.empty:  # nothing profiled (every variant failed or was not run)
        table = _empty("roofline", study)
    tables.write(table, out, "roofline", study.size_names)
    return 0


def sanitize_gate(study: Study, table_path, out) -> int:
    """The sanitize gate of one study (the bench gate's rules, kernelbook.gate): ``out`` is
    written when every finding is known or one its negative controls declare."""
    table = tables.read(table_path)
    found = gate.failures(study.name, study.expects(), sanitizer=table)
    if any(not f.expected for f in found):
        raise SanitizerFindings(
            gate.summary(study.name, found, str(table_path))
            + "\n(findings that are understood: add known_findings with the reason to the "
            "variant's config entry)"
        )
    known = int((table["verdict"] == "known").sum())
    Path(out).write_text(
        f"{study.name}: {table['variant'].nunique()} variants x {table['tool'].nunique()} tools "
        f"clean ({known} known findings)\n"
    )
    return 0
