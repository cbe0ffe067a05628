"""One bench job: a variant checked and timed at its sizes (an autotuned variant's winners
confirmed and swept), its rows and samples written, a table printed."""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from kernelbook import gpu, problems, tables, tune
from kernelbook.build import nvcc
from kernelbook.build.job import (
    BuildInfo,
    compile_now,
    nvcc_flags_text,
    row_smem,
    sibling_build_row,
)
from kernelbook.config import ConfigError, Project, Study, Variant
from kernelbook.launch.kernel import KernelFailure
from kernelbook.measure import bench
from kernelbook.measure.timing import TimingError
from kernelbook.problems.base import CheckError
from kernelbook.tables import TableError


def _eprint(*a):
    print(*a, file=sys.stderr, flush=True)


def _parse_sizes(problem, sizes: list[str] | None) -> list[dict] | None:
    """--size labels as size dicts (None: the study's sizes); a bad label is a ConfigError."""
    try:
        return [problem.parse_size(t) for t in sizes] if sizes else None
    except ValueError as e:
        raise ConfigError(str(e)) from None


def bench_job(
    project: Project,
    study: Study,
    variant: Variant,
    sizes: list[str] | None = None,
    cubin: str | None = None,
    build_table: str | None = None,
    out: str | None = None,
    samples_out: str | None = None,
    tuned_table: str | None = None,
    build_dir: str | None = None,
    record_failure: bool = False,
) -> int:
    """Check, then time ``variant`` beside its baselines at ``sizes`` (size labels; None:
    the study's). Without ``cubin`` it is built first (the quick loop)."""
    problem = problems.get(study.problem)
    parsed = _parse_sizes(problem, sizes)
    if variant.is_tuned:
        return _tuned_job(
            project, study, variant, parsed, tuned_table, build_dir, out, samples_out,
            record_failure,
        )  # fmt: skip
    samples: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        info = _build(project, study, variant, Path(tmp), cubin, build_table)
        slot = gpu.acquire_slot(shared=True)  # built first: no compile holds the GPU's lock
        rows = _plain_rows(project, study, variant, info, parsed, slot, samples, record_failure)
    return _finish(rows, problem, samples, out, samples_out, slot)


def _build(project, study, variant, tmp: Path, cubin=None, build_table=None) -> BuildInfo:
    """A plain (not autotuned) variant's cubin: the one given (with its build row), or built
    now into ``tmp`` (a cache hit where the run's cubin cache holds it). A compile that
    fails raises CompileError, naming the variant, before any GPU is taken."""
    flags = nvcc_flags_text(project, variant)
    if not cubin:
        return compile_now(project, study, variant, tmp / f"{variant.id}.cubin")
    row = tables.read(build_table).iloc[0] if build_table else None
    failed = None
    if row is not None and row.get("status") == "failed":
        failed = str(row["reason"]).removeprefix("compile: ")
    if row is None and variant.kind != "cuda":
        row = sibling_build_row(Path(cubin))
    return BuildInfo(
        Path(cubin),
        row["nvcc_version"] if row is not None else nvcc.nvcc_version(),
        flags,
        failed=failed,
        smem=row_smem(row),
    )


def _build_or_record(
    project, study, variant, tmp: Path, record_failure: bool, build_dir: str | None = None
) -> BuildInfo:
    """_build (from ``build_dir``/<id>/ where given: the pipeline's compile jobs' cubins),
    or (``record_failure``) a failed compile kept as the variant's BuildInfo: its rows then
    say why, with failure 'compile', and the batch's other variants still run."""
    cubin = build_table = None
    if build_dir:
        cubin = Path(build_dir) / variant.id / "kernel.cubin"
        build_table = cubin.parent / "build.parquet"
        if not build_table.is_file():
            raise ConfigError(f"{study.name}/{variant.id}: no build table at {build_table}")
    try:
        return _build(project, study, variant, tmp, cubin, build_table)
    except nvcc.CompileError as e:
        if not record_failure:
            raise
        _eprint(f"{study.name}/{variant.id}: compile failed: {e}")
        flags = nvcc_flags_text(project, variant)
        return BuildInfo(tmp / f"{variant.id}.cubin", "", flags, str(e).splitlines()[0], "compile")


def _plain_rows(project, study, variant, info, sizes, slot, samples, record_failure) -> list:
    """A plain variant's rows: its cubin (``info``) checked and timed at ``sizes``."""
    return bench.bench_variant(
        project, study, variant, info, slot.uuid, sizes=sizes,
        tolerate_failure=record_failure, samples=samples, hold=_holder(slot),
    )  # fmt: skip


def _holder(slot):
    """A bench's hold(shared): the slot's GPU shared for its checks, alone for its timing."""
    return lambda shared: gpu.switch_mode(slot, shared)


def bench_variants(
    project: Project,
    study: Study,
    variants: list[Variant],
    sizes: list[str] | None = None,
    out: str | None = None,
    samples_out: str | None = None,
    record_failure: bool = False,
    build_dir: str | None = None,
) -> int:
    """Several plain variants (a ladder, a tune space's candidates) checked and timed in one
    job, one after another, each beside its baselines: one start-up, one GPU lock, one
    table. All are built first (or found in ``build_dir``), before the GPU is taken.

    The variants run in a worker process forked from this one (which never initialises
    CUDA): one CUDA context for as many variants as it can run. A variant that fails, to
    compile or to run, stops the bench naming it, or (``record_failure``) gets failed rows
    and the next one runs; after a crash or a hang the worker's device is gone, so it leaves
    (its context, and a hung kernel with it, goes with the process) and a fresh worker runs
    the rest. A worker that dies outright (a signal, an error that is not a kernel's) costs
    the variant it was running a failed row, kind crash, naming the signal or the error, and
    the rest run in a fresh one: nothing measured is lost, and every variant is run. The same
    error on two variants in a row ends the bench with that error: the bench's own code is
    at fault, and every variant would fail alike."""
    problem = problems.get(study.problem)
    parsed = _parse_sizes(problem, sizes)
    tuned = [v.id for v in variants if v.is_tuned]
    if tuned:
        raise ConfigError(
            f"{study.name}: {', '.join(tuned)} autotuned: several variants in one bench are "
            "plain variants or candidates (bench a tuned variant alone, with its tables, or "
            "its candidates with --candidates)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        infos = [
            _build_or_record(project, study, v, Path(tmp), record_failure, build_dir)
            for v in variants
        ]
        slot = gpu.acquire_slot(shared=True)  # every variant built first: no compile waits
        try:
            rows, samples = _run_in_workers(
                project, study, list(zip(variants, infos, strict=True)), parsed, slot,
                record_failure,
            )  # fmt: skip
        except BenchStopped as stop:  # the quick loop: what ran before the failure is kept
            if stop.rows:  # none when the first variant failed: no table, only the error
                _finish(stop.rows, problem, stop.samples, out, samples_out, slot, lost=False)
            raise
    return _finish(rows, problem, samples, out, samples_out, slot, lost=False)


class BenchStopped(SystemExit):
    """A bench of several variants stopped by one that failed, without --record-failure
    (the worker has said why): exit status 1, with the rows and samples of the variants
    that ran before it, which the bench still writes."""

    def __init__(self, rows: list[dict], samples: list[dict]):
        super().__init__(1)
        self.rows, self.samples = rows, samples


def _run_in_workers(project, study, items, sizes, slot, record_failure):
    """(rows, samples) of ``items`` ((variant, BuildInfo) pairs) run in turn by forked
    workers (bench_variants); a fresh worker for what a lost device or a dead worker left."""
    rows: list[dict] = []
    samples: list[dict] = []
    rest = list(items)
    last_error = None  # the error the last worker died of, if it raised one
    while rest:
        done, status, error = _worker(project, study, rest, sizes, slot, record_failure)
        for got, taken in done:
            rows += got
            samples += taken
        if any(not info.failed for _, info in rest[: len(done)]):
            last_error = None  # a variant ran to its end since that error
        rest = rest[len(done) :]
        if status != 0 and not record_failure:
            raise BenchStopped(rows, samples)  # the worker said why (kernelbook: error: ...)
        if not rest:
            break
        v, info = rest[0]
        if status != 0 or not done:  # it died running rest[0]: its failed rows, then the rest
            why = f"the bench's worker process {_died(status)}"
            if error:
                why += f", raising {error}"
            if info.failed:  # it died with nothing to run, only rows to write: none can run
                raise gpu.NoGpu(
                    f"{study.name}/{v.id}: {why} while only recording it as failed "
                    f"({info.failed_kind}): this GPU cannot run the bench (see the log above)"
                )
            if error and error == last_error:
                # two variants in a row died of the same error, which no kernel raised (a
                # kernel's failure is a row the bench writes, not an error): the bench is
                # broken, not the kernels; one error rather than a failed row for each
                raise TimingError(
                    f"{study.name}/{v.id}: the bench's worker raised {error} on this variant "
                    "and on the one before it: an error of the bench itself, not of a kernel "
                    "(the traceback is in the log above)"
                )
            last_error = error
            _eprint(f"{study.name}/{v.id}: {why}: recorded as failed (crash)")
            rest[0] = (v, replace(info, failed=why, failed_kind="crash"))
            continue
        lost = done[-1][0]
        _eprint(
            f"{study.name}/{lost[-1]['variant']} lost the device ({lost[-1]['failure']}): "
            "a fresh process runs " + ", ".join(x.id for x, _ in rest)
        )
    return rows, samples


def _died(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by signal {os.WTERMSIG(status)}"
    return f"exited with status {os.WEXITSTATUS(status) if os.WIFEXITED(status) else status}"


# What a bench raises that says all there is to say in its message: a worker reports it in
# one line, as kernelbook's command line does, rather than with a traceback.
_SAID = (ConfigError, nvcc.CompileError, KernelFailure, CheckError, TableError, TimingError)


def _worker(project, study, items, sizes, slot, record_failure):
    """Fork a worker that benches ``items`` in turn, sending each variant's (rows, samples)
    back as it finishes, and leaving after a variant that lost the device; ([(rows,
    samples), ...] of the variants it finished, its wait status, and the error it raised,
    "Type: message", or None)."""
    import pickle

    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: its own CUDA context, gone with it
        os.close(r)
        code = 0
        pipe = os.fdopen(w, "wb")
        try:
            for v, info in items:
                taken: list[dict] = []
                got = _plain_rows(project, study, v, info, sizes, slot, taken, record_failure)
                pickle.dump((got, taken), pipe)
                pipe.flush()
                if bench.device_lost(got) and not info.failed:
                    break  # this process's device is gone: a fresh worker for the rest
        except BaseException as e:  # noqa: BLE001 - a worker reports, then leaves
            code = 1
            if isinstance(e, _SAID):
                _eprint(f"kernelbook: error: {e}")
            else:
                import traceback

                traceback.print_exc()
            try:  # the error, for the variant's failed row
                pickle.dump({"error": f"{type(e).__name__}: {e}"[:500]}, pipe)
                pipe.flush()
            except Exception:  # noqa: BLE001, S110 - a broken pipe: the status says it died
                pass
        finally:
            gpu.hold_ends()  # its last span of the GPU's lock, in the ledger
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)  # no clean-up that waits on a lost device; the lock is the parent's
    gpu.forget_hold()  # the worker writes the ledger's lines of its spans
    os.close(w)
    done, error = [], None
    with os.fdopen(r, "rb") as pipe:
        while True:
            try:
                got = pickle.load(pipe)
            except EOFError:
                break
            except pickle.UnpicklingError:
                break  # a torn message: the worker died writing it
            if isinstance(got, dict):
                error = got["error"]
            else:
                done.append(got)
    _, status = os.waitpid(pid, 0)
    slot.mode = None  # as the worker left it (its fork of the lock's file is this one's)
    return done, status, error


def _tuned_job(
    project, study, variant, sizes, tuned_table, build_dir, out, samples_out, record_failure
) -> int:
    """An autotuned variant's own job: each tune size's winner is timed again at that size
    (confirmation: the published row is this re-timing, not the best of many candidates'
    own, so the pick does not lean to the luckiest), and the winner at the pick size
    (tune.sweep_pick) runs at the other sizes; rows are labelled as the tuned variant."""
    problem = problems.get(study.problem)
    if not (tuned_table and build_dir):
        raise ConfigError(
            f"{study.name}/{variant.id} is autotuned: bench one of its candidates "
            f"({', '.join(variant.candidates[:3])}, ...), or give --tuned-table and --build-dir "
            "to confirm its winners and run them at the sizes they were not tuned at"
        )
    selection = tables.read(tuned_table)
    won = tune.winners(selection)
    selected_ms = tune.selected_ms(selection)
    if sizes is None:
        plan = tune.winner_runs(study, variant, won)
    else:  # --size: the pick size's winner at the sizes asked for
        pick = problem.label(tune.sweep_pick(study, variant))
        plan = [(won[pick], sizes)] if pick in won else [(None, sizes)]
    slot = gpu.acquire_slot(shared=True)
    rows: list[dict] = []
    samples: list[dict] = []
    for cand, run_sizes in plan:
        if cand is not None:
            run = study.variant(cand)
            cubin = Path(build_dir) / cand / "kernel.cubin"
            row = tables.read(cubin.parent / "build.parquet").iloc[0]
            info = BuildInfo(
                cubin, row["nvcc_version"], nvcc_flags_text(project, run), smem=row_smem(row)
            )
        else:
            pick = problem.label(tune.sweep_pick(study, variant))
            why = (
                f"{study.name}/{variant.id}: no candidate ran correctly at {pick} "
                f"({tuned_table}), so there is no winner to run at the other sizes"
            )
            if not record_failure:
                raise ConfigError(why)
            run = variant
            info = BuildInfo(
                Path(tuned_table), "", nvcc_flags_text(project, variant), why, "no_winner"
            )
        start = len(samples)
        got = bench.bench_variant(
            project, study, run, info, slot.uuid, sizes=run_sizes,
            tolerate_failure=record_failure, samples=samples, hold=_holder(slot),
        )  # fmt: skip
        for x in samples[start:]:
            x["job"] = variant.id  # this job's, apart from the candidate's own job's
        for r in got:
            r.update(variant=variant.id, variant_kind="tuned", tuned_from=cand)
            if cand is not None and won.get(r["size"]) == cand:
                r["selected_median_ms"] = selected_ms.get(r["size"])
        rows += got
        if bench.device_lost(got):
            break
    # samples name the candidate that ran (variant) and this job (job: the tuned variant)
    return _finish(rows, problem, samples, out, samples_out, slot)


def _finish(rows, problem, samples, out, samples_out, slot, lost: bool | None = None) -> int:
    """Write and print a job's rows (each with the job's start-up and its wait for the GPU),
    the GPU's lock given back first; after a crash or a hang in this process (``lost``; by
    default, whether a row says so), keep the lock and leave without the clean-up that would
    wait on the lost device (the rows are on disk by then)."""
    import pandas as pd

    if lost is None:
        lost = bench.device_lost(rows)
    if not lost:
        gpu.release_slot(slot)  # the GPU's work is done: the next job need not wait for this
    for r in rows:
        r.update(job_startup_s=slot.startup_s, job_wait_s=slot.wait_s)
    if samples_out:  # none when the variant failed before any timing
        tables.write(
            samples or pd.DataFrame(columns=tables.schema("samples").names),
            samples_out,
            "samples",
        )
    if out:
        tables.write(rows, out, "measurements", problem.size_names)
    print_rows(rows)
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        _eprint(
            f"{len(failed)} size(s) failed ({', '.join(sorted({r['failure'] for r in failed}))}): "
            "recorded as failed rows; the bench gate reports them at the end of the run"
        )
    if lost:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def print_rows(rows) -> None:
    cols = ("size", "status", "median ms", "TFLOP/s", "GB/s", "base ms", "% base", "rel err")
    widths = (16, 8, 10, 8, 8, 9, 7, 8)
    many = len({r["variant"] for r in rows}) > 1  # several variants: each row says which
    name = max((len(r["variant"]) for r in rows), default=0) if many else 0
    head = f"{'variant':<{name}} " if many else ""
    print(head + " ".join(f"{c:>{w}}" for c, w in zip(cols, widths, strict=True)))
    for r in rows:
        lead = f"{r['variant']:<{name}} " if many else ""
        if r["status"] != "ok":
            print(f"{lead}{r['size']:>16} {r['status']:>8}  {r['reason']}")
            continue
        print(
            f"{lead}{r['size']:>16} {r['status']:>8} {r['median_ms']:10.4f} {r['tflops']:8.2f} "
            f"{r['gbps']:8.1f} {r['baseline_median_ms']:9.4f} {r['pct_of_baseline']:7.1f} "
            f"{r['rel_err']:8.1e}" + ("  throttled" if r["throttled"] else "")
        )
