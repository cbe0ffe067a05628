"""Nsight Compute: profile one variant in its own process, read the report into rows,
and derive the roofline table (FLOPs, bytes at DRAM/L2/L1, intensities, bounds)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pandas as pd

from kernelbook import provenance
from kernelbook.config import tool_limit
from kernelbook.launch.process import NVTX_RANGE, launch_command
from kernelbook.layout import RANGED_PROFILE_REPORT, STUDY_PROFILE_REPORT
from kernelbook.procs import ToolTimeout, run_tool
from kernelbook.profile.ncu_read import (  # noqa: F401 - the profile's readers, named here too
    ProfileError,
    combine_kernels,
    group_by_launch,
    import_ncu_report,
    launch_of,
    ncu_python_dirs,
    read_report,
    read_report_all,
    read_report_by_launch,
    read_report_each,
)

NCU_TIMEOUT_S = 900.0  # timeouts.ncu_s's default

# Sections give speed-of-light, occupancy with its limiters, launch resources, warp-stall
# reasons and memory-workload counters; the metrics add what the roofline and the ladder's
# questions need (FLOP counts by precision, bytes per level, bank conflicts, sectors).
DEFAULT_SECTIONS = [
    "SpeedOfLight",
    "Occupancy",
    "LaunchStats",
    "WarpStateStats",
    "MemoryWorkloadAnalysis",
]
FLOP_METRICS = {
    f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum": (2 if op == "fma" else 1)
    for p in ("f", "h", "d")
    for op in ("add", "mul", "fma")
}
DEFAULT_METRICS = [
    "gpu__time_duration.sum",
    *FLOP_METRICS,
    "sm__inst_executed_pipe_tensor_op_hmma.sum",
    "sm__inst_executed_pipe_tensor_op_gmma.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
    "l1tex__t_bytes.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "launch__registers_per_thread",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
]
# ldmatrix bank conflicts and tensor pipe utilisation (a study asks for them in its
# profile: metrics)
LDSM_CONFLICTS = "sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum"
TENSOR_PIPE_METRICS = (
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
)
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"


def ncu_exe() -> str:
    exe = shutil.which("ncu")
    if not exe:
        raise ProfileError("ncu (Nsight Compute) is not on PATH")
    return exe


@functools.lru_cache(maxsize=1)
def ncu_version() -> str:
    """`ncu --version`'s last line, asked once a process (a profile job asks before it takes
    the GPU's lock: ncu's start-up is not GPU time)."""
    try:
        out = run_tool([ncu_exe(), "--version"], timeout=60, what="ncu", setting="60 s").stdout
    except ToolTimeout:
        return "unknown"
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


# A torch variant's kernels: those launched inside the launch's NVTX push/pop range
NVTX_INCLUDE = f"{NVTX_RANGE}/"


def ncu_command(
    entry: str | list[str] | None,
    report: Path,
    launch_cmd: list[str],
    prof: dict,
    launches: int = 1,
    exe: str | None = None,
) -> list[str]:
    """The ncu call for the first ``launches`` launches of one kernel (``entry``: one a
    size, when the launch helper runs several sizes in turn) or of any of several (a list:
    a study's variants, one after another), or, with ``entry`` None (a torch variant), for
    every kernel inside the launch's NVTX range; ``prof`` is a study's resolved profile
    settings."""
    if isinstance(entry, (list, tuple)):  # several variants' kernels in one run
        names = list(dict.fromkeys(entry))
        entry = names[0] if len(names) == 1 else "(" + "|".join(names) + ")"
    only = (
        ["-k", f"regex:^{entry}$", "--launch-count", str(launches)]
        if entry
        else ["--nvtx", "--nvtx-include", NVTX_INCLUDE]
    )
    cmd = [
        exe or ncu_exe(),
        "--clock-control",
        prof.get("clock_control", "none"),
        "--cache-control",
        "all",
        "--target-processes",
        "all",
        "--force-overwrite",
        *only,
        "-o",
        str(report),
    ]
    if prof.get("set"):
        cmd += ["--set", prof["set"]]
    for section in prof.get("sections", DEFAULT_SECTIONS):
        cmd += ["--section", section]
    metrics = list(DEFAULT_METRICS) + list(prof.get("metrics", []))
    cmd += ["--metrics", ",".join(dict.fromkeys(metrics))]
    return cmd + launch_cmd


def run_ncu(
    entry: str | list[str] | None,
    report: Path,
    launch_cmd: list[str],
    prof: dict,
    where: str,
    env,
    timeout: float = NCU_TIMEOUT_S,
    launches: int = 1,
) -> str:
    """ncu on the launch helper; past ``timeout`` (timeouts.ncu_s) its process group, the
    launch helper included, is killed and ToolTimeout raised."""
    cmd = ncu_command(entry, report, launch_cmd, prof, launches)
    proc = run_tool(cmd, timeout=timeout, what=where, setting="timeouts.ncu_s", env=env)
    log = proc.stdout + proc.stderr
    rep = Path(str(report) + ".ncu-rep")
    if proc.returncode != 0 or not rep.is_file():
        raise ProfileError(f"{where}: ncu failed (exit {proc.returncode}):\n{log[-4000:]}")
    if "==PROF== Profiling" not in log:
        what = f"named {entry}" if entry else f"inside the NVTX range {NVTX_INCLUDE}"
        raise ProfileError(f"{where}: ncu ran but profiled no kernel {what}:\n{log[-2000:]}")
    return log


class _Rows(list):
    """Rows of the profile table for one variant: metric rows, and marker rows (not_run,
    failed) for the sizes that have no metrics."""

    def __init__(self, prov: dict, log):
        super().__init__()
        self.prov, self.log = prov, log

    def add(self, s, label, **cols):
        self.append(
            {
                **self.prov,
                **s,
                "size": label,
                **dict.fromkeys(("status", "reason", "failure", "metric", "value", "unit")),
                **dict.fromkeys(("kernel", "report", "ncu_s", "read_s")),
                "measured_at": provenance.now(),
                **cols,
            }
        )

    def marker(self, s, label, status, kind, reason):
        where = f"{self.prov['study']}/{self.prov['variant']} at {label}"
        self.log(f"{where}: {status.replace('_', ' ')} ({kind}): {reason}")
        self.add(s, label, status=status, reason=reason, failure=kind)

    def metrics(self, s, label, kernel, metrics, report_name, ncu_s, read_s):
        now = provenance.now()
        for name, value, unit in metrics:
            self.add(s, label, status="ok", metric=name, value=value, unit=unit, kernel=kernel,
                     report=report_name, ncu_s=ncu_s, read_s=read_s, measured_at=now)  # fmt: skip


def _context(project, study, slot_uuid: str):
    """What every profile row of a job shares: the GPU's facts, ncu's version, the limit."""
    from kernelbook import gpu

    facts = gpu.device_facts(slot_uuid)
    env = {**os.environ, gpu.SLOT_HELD_ENV: "1", "CUDA_VISIBLE_DEVICES": slot_uuid}
    return facts, ncu_version(), tool_limit(project.settings, "ncu_s"), env


def _prov(project, study, variant, facts, version) -> dict:
    from kernelbook.provenance import sha256_source

    # a baseline (launch.process.BaselineRun) has no source of the project's: the library's
    # version is on its measurement rows
    return {
        "study": study.name,
        "variant": variant.id,
        "clock_control": study.profile.get("clock_control", "none"),
        "gpu_name": facts["gpu_name"],
        "gpu_uuid": facts["gpu_uuid"],
        "driver_version": facts["driver_version"],
        "ncu_version": version,
        "source_sha256": sha256_source(project.root / variant.source) if variant.source else "",
        "git_commit": provenance.git_commit(project.root),
    }


def _todo(study, variant, sizes, skip, rows: _Rows, log) -> list[tuple[dict, str]]:
    """The sizes of ``variant`` to profile, as (size, label): those its `requires` rule out
    are left out, and those the bench found failing (``skip``) get a not_run row."""
    from kernelbook import problems

    problem = problems.get(study.problem)
    todo = []
    for s in sizes:
        label = problem.label(s)
        unmet = variant.unmet(s)
        if unmet:
            why = " and ".join(unmet)
            log(f"{study.name}/{variant.id} at {label}: not profiled, requires {why}")
            continue
        if label in (skip or {}):
            kind, why = skip[label]
            rows.marker(s, label, "not_run", kind, f"not profiled: the bench failed here ({why})")
            continue
        todo.append((s, label))
    return todo


def by_range(variant) -> bool:
    """A torch variant, one of several kernels (then:) or a baseline: profiled as every
    kernel of the launch's NVTX range, summed as one, a process a size."""
    return variant.kind in ("torch", "baseline") or bool(variant.then)


def profile_variant(
    project,
    study,
    variant,
    cubin: Path,
    sizes,
    report_dir: Path,
    slot_uuid: str,
    log=lambda s: print(s, file=sys.stderr, flush=True),
    skip: dict[str, tuple[str, str]] | None = None,
    context=None,
) -> list[dict]:
    """Profile ``variant`` at each size; rows of the profile table.

    A variant of one named kernel is profiled at every size in one ncu process (the launch
    helper runs the sizes in turn; the report, ``<size>+<size>....ncu-rep``, holds a kernel
    a size, in order). Should that run fail, each size runs in its own process, as a torch
    variant's or a several-kernel variant's sizes always do (``<size>.ncu-rep``), so that a
    failure is one size's.

    ``skip`` maps size labels the bench found failing to (kind, reason): they are not run
    again, and get one ``not_run`` row. An ncu run that fails gets one ``failed`` row (kind
    tool) a size, and the other sizes go on; one that runs past timeouts.ncu_s, a ``failed``
    row of kind hang for each size it held.
    """
    facts, version, timeout, env = context or _context(project, study, slot_uuid)
    report_dir.mkdir(parents=True, exist_ok=True)
    rows = _Rows(_prov(project, study, variant, facts, version), log)
    todo = _todo(study, variant, sizes, skip, rows, log)
    ranged = by_range(variant)
    if not ranged and len(todo) > 1:
        labels = [label for _, label in todo]
        report = report_dir / "+".join(labels)
        where = f"{study.name}/{variant.id} at {', '.join(labels)}"
        launch = launch_command(project, study, variant, labels, cubin)
        try:
            t0 = time.monotonic()
            run_ncu(variant.entry, report, launch, study.profile, where, env, timeout, len(todo))
            t1 = time.monotonic()
            each = read_report_each(Path(str(report) + ".ncu-rep"))
            share = ((t1 - t0) / len(todo), (time.monotonic() - t1) / len(todo))
            if len(each) != len(todo):
                raise ProfileError(f"{where}: {len(each)} kernels profiled for {len(todo)} sizes")
        except ToolTimeout as e:
            for s, label in todo:
                rows.marker(s, label, "failed", "hang", str(e))
            return list(rows)
        except ProfileError as e:
            log(f"{where}: one ncu run for every size failed, each size on its own now: {e}")
        else:
            for (s, label), (kernel, metrics) in zip(todo, each, strict=True):
                log(f"{study.name}/{variant.id} at {label}: {len(metrics)} metrics from "
                    f"{report.name}.ncu-rep")  # fmt: skip
                rows.metrics(s, label, kernel, metrics, f"{report.name}.ncu-rep", *share)
            return list(rows)
    for s, label in todo:
        where = f"{study.name}/{variant.id} at {label}"
        report = report_dir / label
        launch = _launch_one(project, study, variant, label, cubin, report_dir)
        try:
            t0 = time.monotonic()
            run_ncu(
                None if ranged else variant.entry,
                report,
                launch,
                study.profile,
                where,
                env,
                timeout,
            )
            t1 = time.monotonic()
            read = read_report_all if ranged else read_report
            kernel, metrics = read(Path(str(report) + ".ncu-rep"))
            t2 = time.monotonic()
        except ToolTimeout as e:
            rows.marker(s, label, "failed", "hang", str(e))
            continue
        except ProfileError as e:
            rows.marker(s, label, "failed", "tool", str(e))
            continue
        log(f"{where}: {len(metrics)} metrics from {report.name}.ncu-rep")
        rows.metrics(s, label, kernel, metrics, f"{report.name}.ncu-rep", t1 - t0, t2 - t1)
    return list(rows)


def _launch_one(project, study, variant, label: str, cubin, report_dir: Path) -> list[str]:
    """The launch helper for one size: `kernelbook launch STUDY VARIANT`, or for a baseline
    (which `launch` names only in a plan) a plan of that one entry."""
    from kernelbook.launch.process import BaselineRun, plan_command, write_plan

    if not isinstance(variant, BaselineRun):
        return launch_command(project, study, variant, label, cubin)
    plan = write_plan(report_dir / f"{label}.plan.json", [(variant.id, None, [label])])
    return plan_command(project, study, plan)


def out_of_order(kernels: list[str], planned: list[str]) -> str | None:
    """Why a study run's report does not hold the planned launches in order (its kernel
    names against the entries planned, launch by launch), or None where it does."""
    if len(kernels) != len(planned):
        return f"{len(kernels)} kernels profiled for {len(planned)} launches"
    for i, (kernel, entry) in enumerate(zip(kernels, planned, strict=True)):
        if not re.match(rf"^(void )?{re.escape(entry)}\b", kernel):
            return f"launch {i} should be {entry}, the report has {kernel}"
    return None


def profile_study(
    project,
    study,
    entries,
    report_dir: Path,
    slot_uuid: str,
    log=lambda s: print(s, file=sys.stderr, flush=True),
) -> list[dict]:
    """Profile a study's variants in one ncu process: ``entries`` are (job, variant, cubin,
    sizes, skip), one a variant to run (a tuned variant's winning candidate at each size is
    an entry of its own, ``job`` naming the tuned variant); rows of the profile table, each
    labelled with its entry's job.

    The launch helper runs every entry's sizes in turn from a launch plan, and ncu profiles
    each launch of the variants' named kernels (``study.ncu-rep``: action i is launch i):
    one start-up of ncu, Python and CUDA for the study instead of one a variant, within
    timeouts.ncu_s for each variant it holds. Should that run fail (a kernel that faults
    under replay, a report that does not hold the planned kernel at each launch), every
    variant is profiled on its own (profile_variant: its sizes in one process,
    then each size alone), so that a failure is one variant's, then one size's. A torch
    variant and a several-kernel one (their kernels are found by NVTX range, a process a
    size) always run on their own."""
    from kernelbook.launch.process import plan_command, write_plan

    context = _context(project, study, slot_uuid)
    facts, version, timeout, env = context
    report_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    batch = []  # (job, variant, cubin, todo): one ncu run for them all
    alone = []
    for job, variant, cubin, sizes, skip in entries:
        if by_range(variant):
            alone.append((job, variant, cubin, sizes, skip))
            continue
        own = _Rows(_prov(project, study, variant, facts, version), log)
        todo = _todo(study, variant, sizes, skip, own, log)
        rows += [{**r, "variant": job} for r in own]
        if todo:
            batch.append((job, variant, cubin, todo))
    launches = sum(len(todo) for *_, todo in batch)
    if len(batch) > 1:
        report = report_dir / STUDY_PROFILE_REPORT
        where = f"{study.name}: {len(batch)} variants, {launches} launches"
        plan = write_plan(
            report_dir / f"{STUDY_PROFILE_REPORT}.plan.json",
            [(v.id, cubin, [label for _, label in todo]) for _, v, cubin, todo in batch],
        )
        entry_names = [v.entry for _, v, _, _ in batch]
        try:
            t0 = time.monotonic()
            # each variant keeps its own allowance (timeouts.ncu_s a variant)
            run_ncu(entry_names, report, plan_command(project, study, plan), study.profile,
                    where, env, timeout * len(batch), launches)  # fmt: skip
            t1 = time.monotonic()
            each = read_report_each(Path(str(report) + ".ncu-rep"))
            share = ((t1 - t0) / launches, (time.monotonic() - t1) / launches)
            planned = [v.entry for _, v, _, todo in batch for _ in todo]
            wrong = out_of_order([kernel for kernel, _ in each], planned)
            if wrong:
                raise ProfileError(f"{where}: {wrong}")
        except (ProfileError, ToolTimeout) as e:
            log(f"{where}: one ncu run for the study failed, each variant on its own now: {e}")
        else:
            rows += _shared_rows(project, study, context, log, report, each, share,
                                 [(job, v, todo) for job, v, _, todo in batch])  # fmt: skip
            batch = []
    for job, variant, cubin, todo in batch:  # on its own (no study run, or it failed)
        sizes = [s for s, _ in todo]
        part = profile_variant(project, study, variant, cubin, sizes, report_dir / variant.id,
                               slot_uuid, log, context=context)  # fmt: skip
        rows += [{**r, "variant": job} for r in part]
    got, alone = _ranged_run(project, study, alone, report_dir, context, log)
    rows += got
    for job, variant, cubin, sizes, skip in alone:
        folder = report_dir / variant.id.replace(":", "-")  # a baseline's: baseline-cublas
        part = profile_variant(project, study, variant, cubin, sizes, folder, slot_uuid, log,
                               skip, context=context)  # fmt: skip
        rows += [{**r, "variant": job} for r in part]
    return rows


def _ranged_run(project, study, entries, report_dir: Path, context, log):
    """The torch and several-kernel variants of ``entries`` at all their sizes in one ncu
    run (``ranged.ncu-rep``), each launch's kernels told apart by its NVTX_LAUNCH range:
    one start-up of ncu, Python, torch and CUDA instead of one a size. (rows, the entries
    left to profile on their own): all of them where there is less than two launches to
    share a run, or where the run fails (then each runs as before, a process a size, so
    that a failure is one size's)."""
    from kernelbook.launch.process import plan_command, write_plan

    facts, version, timeout, env = context
    rows: list[dict] = []
    batch = []
    for job, variant, cubin, sizes, skip in entries:
        own = _Rows(_prov(project, study, variant, facts, version), log)
        todo = _todo(study, variant, sizes, skip, own, log)
        batch.append((job, variant, cubin, todo, [{**r, "variant": job} for r in own]))
    launches = sum(len(todo) for _, _, _, todo, _ in batch)
    if launches < 2:
        return [], entries
    report = report_dir / RANGED_PROFILE_REPORT
    where = f"{study.name}: {len(batch)} variant(s) by NVTX range, {launches} launches"
    plan = write_plan(
        report_dir / f"{RANGED_PROFILE_REPORT}.plan.json",
        [(v.id, cubin, [label for _, label in todo]) for _, v, cubin, todo, _ in batch if todo],
    )
    try:
        t0 = time.monotonic()
        launch = plan_command(project, study, plan, "--tag-launches")
        run_ncu(None, report, launch, study.profile, where, env, timeout * len(batch))
        t1 = time.monotonic()
        each = read_report_by_launch(Path(str(report) + ".ncu-rep"), launches, where)
        share = ((t1 - t0) / launches, (time.monotonic() - t1) / launches)
    except (ProfileError, ToolTimeout) as e:
        log(f"{where}: one ncu run for them failed, a process a size now: {e}")
        return [], entries
    except Exception as e:  # the shared run only saves start-ups: its fallback measures the same
        log(
            f"{where}: reading the one ncu run failed, a process a size now: "
            f"{type(e).__name__}: {e}"
        )
        return [], entries
    for job, variant, _, todo, markers in batch:
        rows += markers + _shared_rows(project, study, context, log, report, each, share,
                                       [(job, variant, todo)])  # fmt: skip
        each = each[len(todo) :]
    return rows, []


def _shared_rows(project, study, context, log, report: Path, each, share, runs) -> list[dict]:
    """The rows of ``runs`` ((job, variant, todo) in launch order) from one shared run's
    report: ``each`` is its launches' (kernel, metrics), in the same order, ``share`` each
    launch's part of the run's (ncu, read) seconds."""
    facts, version, _, _ = context
    at = iter(each)
    name = f"{report.name}.ncu-rep"
    rows: list[dict] = []
    for job, variant, todo in runs:
        own = _Rows(_prov(project, study, variant, facts, version), log)
        for s, label in todo:
            kernel, metrics = next(at)
            own.metrics(s, label, kernel, metrics, name, *share)
        log(f"{study.name}/{variant.id}: {len(todo)} size(s) from {name}")
        rows += [{**r, "variant": job} for r in own]
    return rows


def profiled(profile: pd.DataFrame) -> pd.DataFrame:
    """The metric rows of a profile table (not_run and failed rows hold no metric)."""
    if "status" not in profile.columns:
        return profile
    return profile[profile["status"].isna() | (profile["status"] == "ok")]
