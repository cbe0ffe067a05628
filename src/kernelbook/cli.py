"""kernelbook's command line: the rules call it, and it is the quick loop outside the DAG.

kernelbook list [STUDY]                      studies, variants, sizes
kernelbook compile STUDY VARIANT ...         nvcc + resource report + SASS histogram
kernelbook bench STUDY VARIANT [--size S]    check, then time beside the baseline
kernelbook device --out FILE                 NVML facts and measured ceilings
kernelbook gather TABLE OUT IN...            concatenate per-job tables
kernelbook select STUDY VARIANT --out F IN.. autotuning reduce
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from kernelbook import config as cfg
from kernelbook import problems


def launch_command(project, study, variant, size_label: str, cubin, *extra: str) -> list[str]:
    """`kernelbook launch` for one variant at one size: what ncu and compute-sanitizer run."""
    settings = json.dumps({**project.settings, "studies": [study.name]})
    return [
        sys.executable,
        "-m",
        "kernelbook",
        "--settings",
        settings,
        "launch",
        study.name,
        variant.id,
        "--size",
        size_label,
        "--cubin",
        str(cubin),
        *extra,
    ]


def _project(args) -> cfg.Project:
    overrides = json.loads(args.settings) if args.settings else None
    return cfg.load_project_file(args.configfile, overrides=overrides)


def _load_study(args, project, name: str):
    """A study of the project, or one not in its `studies` list, from the study folder."""
    if name not in project.studies:
        path = Path(args.configfile).resolve().parent.parent / project.settings["study_dir"]
        project.studies[name] = cfg.load_study(
            path / f"{name}.yaml", project.settings, project.root
        )
    return project.study(name)


def _study_variant(args):
    project = _project(args)
    study = _load_study(args, project, args.study)
    return project, study, study.variant(args.variant)


def _eprint(*a):
    print(*a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------
def cmd_list(args) -> int:
    project = _project(args)
    names = [args.study] if args.study else list(project.studies)
    for name in names:
        s = project.study(name)
        p = problems.get(s.problem)
        print(
            f"{name}: {s.problem} {s.dtype}, baseline {s.baseline}, {len(s.sizes)} sizes: "
            + ", ".join(p.label(z) for z in s.sizes)
        )
        for v in s.variants:
            extra = f"  [{len(v.candidates)} candidates]" if v.is_tuned else ""
            print(f"  {v.id:28s} {v.entry:28s} {v.says}{extra}")
    return 0


def cmd_compile(args) -> int:
    from kernelbook import gpu, tables
    from kernelbook.build import nvcc as build

    project, study, variant = _study_variant(args)
    s = project.settings
    flags = list(s["nvcc_flags"]) if variant.kind == "cuda" else []
    if variant.kind == "torch":
        return _record_not_compiled(args, project, study, variant)
    try:
        if variant.kind == "triton":
            from kernelbook.build import triton as kinds

            res = kinds.compile_triton(
                variant,
                s["arch"],
                project.root,
                study.dtype,
                study.problem,
                Path(args.cubin),
                s["timeouts"]["nvcc_s"],
            )
        else:
            res = build.compile_variant(
                variant, s["arch"], flags, project.root, Path(args.cubin), s["timeouts"]["nvcc_s"]
            )
    except build.CompileError as e:
        if not args.record_failure:
            raise
        return _record_compile_failure(args, project, study, variant, flags, e)
    r = res.resources
    row = {
        "study": study.name,
        "variant": variant.id,
        "tuned_from": variant.tuned_from,
        "status": "ok",
        "reason": None,
        "kind": variant.kind,
        "entry": variant.entry,
        "source": variant.source,
        "arch": variant.target(s["arch"]),
        "registers": r.registers,
        "barriers": r.barriers,
        "smem_static_bytes": r.smem_static_bytes,
        "stack_bytes": r.stack_bytes,
        "spill_store_bytes": r.spill_store_bytes,
        "spill_load_bytes": r.spill_load_bytes,
        "cmem0_bytes": r.cmem0_bytes,
        "smem_dynamic_bytes": getattr(res, "smem_dynamic", None),
        "sass_instructions": sum(res.sass.values()),
        "source_sha256": build.sha256_source(project.root / variant.source),
        "spec_sha256": variant.spec_sha256(),
        "cubin_sha256": build.sha256_file(args.cubin),
        "defines": json.dumps(variant.defines),
        "nvcc_flags": " ".join(flags + list(variant.nvcc_flags)),
        "nvcc_version": res.nvcc_version,
        "nvcc_command": " ".join(res.command),
        "git_commit": gpu.git_commit(project.root),
        "built_at": gpu.now(),
    }
    _eprint(res.log.strip())
    _eprint(
        f"{study.name}/{variant.id}: {r.registers} registers, {r.smem_static_bytes} B static smem, "
        f"{r.spill_store_bytes}/{r.spill_load_bytes} B spilled, {row['sass_instructions']} SASS"
    )
    if args.build:
        tables.write([row], args.build, "build")
    if args.sass:
        sass = [
            {
                "study": study.name,
                "variant": variant.id,
                "opcode": op,
                "op": op.split(".")[0],
                "count": n,
            }
            for op, n in sorted(res.sass.items())
        ]
        tables.write(sass, args.sass, "sass")
    return 0


def _record_not_compiled(args, project, study, variant) -> int:
    """A torch variant has no compile step: its build row says so (no cubin, no SASS); the
    cubin file is left empty, as for a failed build, so the DAG's files stay the same."""
    import pandas as pd

    from kernelbook import gpu, tables
    from kernelbook.build import nvcc as build

    cubin = Path(args.cubin)
    cubin.parent.mkdir(parents=True, exist_ok=True)
    cubin.write_bytes(b"")
    row = {
        "study": study.name,
        "variant": variant.id,
        "tuned_from": variant.tuned_from,
        "status": "not_compiled",
        "reason": "torch variant: no compile step (torch launches its own kernels; no cubin, "
        "no SASS)",
        "kind": variant.kind,
        "entry": variant.entry,
        "source": variant.source,
        "arch": project.settings["arch"],
        "source_sha256": build.sha256_source(project.root / variant.source),
        "spec_sha256": variant.spec_sha256(),
        "cubin_sha256": "",
        "defines": json.dumps(variant.defines),
        "nvcc_flags": "",
        "nvcc_version": "",
        "nvcc_command": "",
        "git_commit": gpu.git_commit(project.root),
        "built_at": gpu.now(),
    }
    _eprint(f"{study.name}/{variant.id}: {row['reason']}")
    if args.build:
        tables.write([row], args.build, "build")
    if args.sass:
        tables.write(pd.DataFrame(columns=tables.schema("sass").names), args.sass, "sass")
    return 0


def _record_compile_failure(args, project, study, variant, flags, error) -> int:
    """A variant that does not compile still gets its outputs: a failed build row with
    nvcc's message, an empty SASS table and an empty cubin (which bench, profile and
    sanitize recognise through the build row), so the study's tables and page are made
    and the bench gate reports it at the end of the run."""
    import pandas as pd

    from kernelbook import gpu, tables
    from kernelbook.build import nvcc as build

    _eprint(f"kernelbook: error: {error}")
    _eprint(f"{study.name}/{variant.id}: recorded as a failed build; the run goes on")
    source = project.root / variant.source
    cubin = Path(args.cubin)
    cubin.parent.mkdir(parents=True, exist_ok=True)
    cubin.write_bytes(b"")
    if variant.kind == "triton":
        from kernelbook.build import triton as kinds

        try:
            version = f"triton {kinds.triton_version()}"
        except build.CompileError:
            version = "unknown"
        cmd = [f"triton.compile({variant.entry}) for {project.settings['arch']}"]
    else:
        try:
            version = build.nvcc_version()
        except build.CompileError:
            version = "unknown"
        cmd = build.nvcc_command(variant, project.settings["arch"], flags, source, cubin)
    row = {
        "study": study.name,
        "variant": variant.id,
        "tuned_from": variant.tuned_from,
        "status": "failed",
        "reason": f"compile: {error}",
        "kind": variant.kind,
        "entry": variant.entry,
        "source": variant.source,
        "arch": variant.target(project.settings["arch"]),
        "source_sha256": build.sha256_source(source) if source.is_file() else "",
        "spec_sha256": variant.spec_sha256(),
        "cubin_sha256": "",
        "defines": json.dumps(variant.defines),
        "nvcc_flags": " ".join(flags + list(variant.nvcc_flags)),
        "nvcc_version": version,
        "nvcc_command": " ".join(cmd),
        "git_commit": gpu.git_commit(project.root),
        "built_at": gpu.now(),
    }
    if args.build:
        tables.write([row], args.build, "build")
    if args.sass:
        tables.write(pd.DataFrame(columns=tables.schema("sass").names), args.sass, "sass")
    return 0


def cmd_bench(args) -> int:
    from kernelbook import gpu, tables
    from kernelbook.build import nvcc as build
    from kernelbook.measure import bench

    project, study, variant = _study_variant(args)
    problem = problems.get(study.problem)
    sizes = None
    if args.size:
        try:
            sizes = [problem.parse_size(t) for t in args.size]
        except ValueError as e:
            raise cfg.ConfigError(str(e)) from None
    if variant.is_tuned:
        return _bench_tuned_sweep(args, project, study, variant, sizes)
    slot = gpu.acquire_slot()
    flags = _nvcc_flags(project, variant)
    with tempfile.TemporaryDirectory() as tmp:
        if args.cubin:
            build_row = tables.read(args.build_table).iloc[0] if args.build_table else None
            failed = None
            if build_row is not None and build_row.get("status") == "failed":
                failed = str(build_row["reason"]).removeprefix("compile: ")
            if build_row is None and variant.kind != "cuda":
                build_row = _sibling_build_row(Path(args.cubin))
            info = bench.BuildInfo(
                Path(args.cubin),
                build_row["nvcc_version"] if build_row is not None else build.nvcc_version(),
                flags,
                failed=failed,
                smem=_row_smem(build_row),
            )
        else:
            info = _compile_now(project, study, variant, Path(tmp) / f"{variant.id}.cubin")
        samples: list[dict] = []
        rows = bench.bench_variant(
            project,
            study,
            variant,
            info,
            slot.uuid,
            sizes=sizes,
            tolerate_failure=args.record_failure,
            samples=samples,
        )
    return _finish_bench(args, rows, problem, samples)


def _compile_now(project, study, variant, cubin: Path):
    """Build a variant for a command run outside the pipeline (bench, launch without
    --cubin): nvcc or Triton into ``cubin``; a torch variant has nothing to build."""
    from kernelbook.build import nvcc as build
    from kernelbook.measure import bench

    s = project.settings
    flags = _nvcc_flags(project, variant)
    if variant.kind == "torch":
        return bench.BuildInfo(cubin, "", "")
    if variant.kind == "triton":
        from kernelbook.build import triton as kinds

        res = kinds.compile_triton(
            variant, s["arch"], project.root, study.dtype, study.problem, cubin, _nvcc_timeout(s)
        )
        return bench.BuildInfo(cubin, res.nvcc_version, "", smem=res.smem_dynamic)
    res = build.compile_variant(
        variant, s["arch"], list(s["nvcc_flags"]), project.root, cubin, _nvcc_timeout(s)
    )
    return bench.BuildInfo(cubin, res.nvcc_version, flags)


def _sibling_build_row(cubin: Path):
    """The build row the compile job wrote beside a cubin (None where there is none)."""
    from kernelbook import tables

    path = cubin.parent / "build.parquet"
    return tables.read(path).iloc[0] if path.is_file() else None


def _row_smem(build_row) -> int | None:
    import pandas as pd

    if build_row is None:
        return None
    v = build_row.get("smem_dynamic_bytes")
    return None if v is None or pd.isna(v) else int(v)


def _finish_bench(args, rows, problem, samples) -> int:
    """Write and print a job's rows; after a crash or a hang, leave without the clean-up
    that would wait on the lost device (the rows are on disk by then)."""
    import pandas as pd

    from kernelbook import tables
    from kernelbook.measure import bench

    if args.samples_out:  # none when the variant failed before any timing
        tables.write(
            samples or pd.DataFrame(columns=tables.schema("samples").names),
            args.samples_out,
            "samples",
        )
    if args.out:
        tables.write(rows, args.out, "measurements", problem.size_names)
    _print_rows(rows, problem)
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        _eprint(
            f"{len(failed)} size(s) failed ({', '.join(sorted({r['failure'] for r in failed}))}): "
            "recorded as failed rows; the bench gate reports them at the end of the run"
        )
    if bench.device_lost(rows):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _nvcc_timeout(settings) -> float:
    return float(settings.get("timeouts", {}).get("nvcc_s", 600))


def _bench_tuned_sweep(args, project, study, variant, sizes) -> int:
    """An autotuned variant's own job: each tune size's winner is timed again at that size
    (confirmation: the published row is this re-timing, not the best of many candidates'
    own, so the pick does not lean to the luckiest), and the winner at the pick size
    (tune.sweep_pick) runs at the other sizes; rows are labelled as the tuned variant."""
    from kernelbook import gpu, tables, tune
    from kernelbook.measure import bench

    problem = problems.get(study.problem)
    if not (args.tuned_table and args.build_dir):
        raise cfg.ConfigError(
            f"{study.name}/{variant.id} is autotuned: bench one of its candidates "
            f"({', '.join(variant.candidates[:3])}, ...), or give --tuned-table and --build-dir "
            "to confirm its winners and run them at the sizes they were not tuned at"
        )
    selection = tables.read(args.tuned_table)
    won = tune.winners(selection)
    selected_ms = tune.selected_ms(selection)
    if sizes is None:
        plan = tune.winner_runs(study, variant, won)
    else:  # --size: the pick size's winner at the sizes asked for
        pick = problem.label(tune.sweep_pick(study, variant))
        plan = [(won[pick], sizes)] if pick in won else [(None, sizes)]
    slot = gpu.acquire_slot()
    rows: list[dict] = []
    samples: list[dict] = []
    for cand, run_sizes in plan:
        if cand is not None:
            run = study.variant(cand)
            cubin = Path(args.build_dir) / cand / "kernel.cubin"
            build_row = tables.read(cubin.parent / "build.parquet").iloc[0]
            info = bench.BuildInfo(
                cubin,
                build_row["nvcc_version"],
                _nvcc_flags(project, run),
                smem=_row_smem(build_row),
            )
        else:
            pick = problem.label(tune.sweep_pick(study, variant))
            why = (
                f"{study.name}/{variant.id}: no candidate ran correctly at {pick} "
                f"({args.tuned_table}), so there is no winner to run at the other sizes"
            )
            if not args.record_failure:
                raise cfg.ConfigError(why)
            run = variant
            info = bench.BuildInfo(
                Path(args.tuned_table), "", _nvcc_flags(project, variant), why, "no_winner"
            )
        got = bench.bench_variant(
            project,
            study,
            run,
            info,
            slot.uuid,
            sizes=run_sizes,
            tolerate_failure=args.record_failure,
            samples=samples,
        )
        for r in got:
            r.update(variant=variant.id, variant_kind="tuned", tuned_from=cand)
            if cand is not None and won.get(r["size"]) == cand:
                r["selected_median_ms"] = selected_ms.get(r["size"])
        rows += got
        if bench.device_lost(got):
            break
    # samples are labelled with the candidate that ran, as its own jobs' samples
    return _finish_bench(args, rows, problem, samples)


def _nvcc_flags(project, variant) -> str:
    if variant.kind != "cuda":
        return ""
    return " ".join(list(project.settings["nvcc_flags"]) + list(variant.nvcc_flags))


def _print_rows(rows, problem):
    cols = ("size", "status", "median ms", "TFLOP/s", "GB/s", "base ms", "% base", "rel err")
    widths = (16, 8, 10, 8, 8, 9, 7, 8)
    head = " ".join(f"{c:>{w}}" for c, w in zip(cols, widths, strict=True))
    print(head)
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['size']:>16} {r['status']:>8}  {r['reason']}")
            continue
        print(
            f"{r['size']:>16} {r['status']:>8} {r['median_ms']:10.4f} {r['tflops']:8.2f} "
            f"{r['gbps']:8.1f} {r['baseline_median_ms']:9.4f} {r['pct_of_baseline']:7.1f} "
            f"{r['rel_err']:8.1e}" + ("  throttled" if r["throttled"] else "")
        )


def cmd_launch(args) -> int:
    """Launch one variant at one size a few times: the target of ncu and compute-sanitizer."""
    from kernelbook import gpu

    project, study, variant = _study_variant(args)
    problem = problems.get(study.problem)
    try:
        sizes = problem.parse_size(args.size)
    except ValueError as e:
        raise cfg.ConfigError(str(e)) from None
    if os.environ.get("KERNELBOOK_SLOT_HELD") != "1":
        gpu.acquire_slot()  # a parent (profile, sanitize) that holds the GPU sets the flag
    import cupy as cp

    if args.exact:
        # Plain cudaMalloc per array, no guard bands: compute-sanitizer's memcheck then sees
        # an access past an array's end as outside its allocation.
        cp.cuda.set_allocator(None)
    from kernelbook.measure import bench

    with tempfile.TemporaryDirectory() as tmp:
        if args.cubin:
            cubin = Path(args.cubin)
            smem = _row_smem(_sibling_build_row(cubin)) if variant.kind == "triton" else None
        else:
            info = _compile_now(project, study, variant, Path(tmp) / "kernel.cubin")
            cubin, smem = info.cubin, info.smem
        case = problem.setup(
            sizes,
            study.dtype,
            study.params,
            project.settings["seed"],
            guard=0 if args.exact else 64 * 1024,
            computes=variant.computes,
            reference=args.check,
        )
        kernel = bench.load_kernel(project.root, study, variant, cubin, smem)
        run, launch = bench.kernel_launcher(kernel, study, variant, sizes, case)
        limit = float(project.settings["timeouts"]["launch_s"])
        where = f"{study.name}/{variant.id} at {problem.label(sizes)}"
        nvtx = _nvtx_range()
        for i in range(args.repeat):
            case.reset()
            with nvtx(NVTX_RANGE):  # ncu profiles the kernels inside this range only
                run()
            _wait_or_leave(cp, limit, where)
            if args.check and i == 0:
                tol = study.tolerance or problem.tolerance(sizes, study.dtype)
                r = problem.check(case, tol, f"{study.name}/{variant.id} at {args.size}")
                _eprint(f"correct: rel_err {r.rel_err:.2e}")
    geometry = (
        f"grid {launch.grid}, block {launch.block}, smem {launch.smem}"
        if launch
        else "torch's own kernels"
    )
    _eprint(
        f"{study.name}/{variant.id}: launched {args.repeat}x at {problem.label(sizes)}, {geometry}"
    )
    return 0


NVTX_RANGE = "kernelbook_variant"  # the range ncu's --nvtx-include selects (profile.py)


def _nvtx_range():
    """A context manager pushing an NVTX range (torch's, which needs no other package)."""
    import contextlib

    try:
        import torch

        return torch.cuda.nvtx.range
    except Exception:
        return lambda name: contextlib.nullcontext()


def _wait_or_leave(cp, limit: float, where: str) -> None:
    """Wait for the launch, at most ``limit`` seconds (timeouts.launch_s): a hung kernel
    cannot be stopped from inside, so the process leaves (exit 124) and takes it along."""
    import time

    done = cp.cuda.Event(disable_timing=True)
    done.record()
    start = time.monotonic()
    while not done.done:
        if time.monotonic() - start > limit:
            _eprint(
                f"kernelbook: error: {where}: launch still running after {limit:g} s "
                "(timeouts.launch_s); hang?"
            )
            sys.stderr.flush()
            os._exit(124)
        time.sleep(0.001)
    cp.cuda.runtime.deviceSynchronize()  # raises the launch's error, if any


def _targets(args, project, study, variant, sizes):
    """(variant to run, cubin, sizes) pairs; a tuned variant runs the candidate that won."""
    build_dir = Path(args.build_dir)
    if not variant.is_tuned:
        cubin = Path(args.cubin) if args.cubin else build_dir / variant.id / "kernel.cubin"
        return [(variant, cubin, sizes)]
    from kernelbook import tables, tune

    if not args.tuned_table:
        raise cfg.ConfigError(f"{study.name}/{variant.id} is autotuned: give --tuned-table")
    won = tune.winners(tables.read(args.tuned_table))
    problem = problems.get(study.problem)
    out = []
    for s in sizes:
        cand = won.get(problem.label(s))
        if cand is None:
            _eprint(
                f"{study.name}/{variant.id}: no winning candidate at {problem.label(s)}; skipped"
            )
            continue
        out.append((study.variant(cand), build_dir / cand / "kernel.cubin", [s]))
    return out


def _bench_failures(args, study) -> dict[str, tuple[str, str]]:
    """Size label -> (kind, reason) of the sizes the variant's bench table records failed."""
    if not getattr(args, "bench_table", None):
        return {}
    from kernelbook import gate, tables

    df = tables.read(args.bench_table)
    return {
        r["size"]: (gate.failure_kind(r), str(r["reason"]))
        for _, r in df.iterrows()
        if r["status"] == "failed"
    }


def cmd_profile(args) -> int:
    from kernelbook import gpu, tables
    from kernelbook.profile import ncu as profile

    project, study, variant = _study_variant(args)
    failed = _bench_failures(args, study)
    slot = gpu.acquire_slot(preload=())
    rows = []
    for run, cubin, sizes in _targets(args, project, study, variant, list(study.profile_sizes)):
        part = profile.profile_variant(
            project, study, run, cubin, sizes, Path(args.reports), slot.uuid, skip=failed
        )
        rows += [{**r, "variant": variant.id} for r in part]
    if not rows:
        import pandas as pd

        rows = pd.DataFrame(columns=tables.schema("profile", study.size_names).names)
    tables.write(rows, args.out, "profile", study.size_names)
    return 0


def cmd_sanitize(args) -> int:
    from kernelbook import gpu, tables
    from kernelbook.profile import sanitize

    project, study, variant = _study_variant(args)
    failed = _bench_failures(args, study)
    lost = next(((k, r) for k, r in failed.values() if k in sanitize.NOT_RERUN), None)
    slot = gpu.acquire_slot(preload=())
    if variant.is_tuned:
        headline = study.headline or study.profile_sizes[0]
        targets = _targets(args, project, study, variant, [headline])
    else:
        targets = _targets(args, project, study, variant, [])
    rows = []
    for run, cubin, _ in targets:
        size = study.sanitize_size_for(run)
        if size is None:
            _eprint(f"{study.name}/{run.id}: no size it can run at; not sanitized")
            continue
        part = sanitize.sanitize_variant(
            project,
            study,
            run,
            cubin,
            size,
            slot.uuid,
            tools=study.sanitize_tools,
            skip=lost,
            expect=variant.expect,
        )
        rows += [{**r, "variant": variant.id} for r in part]
    if not rows:
        import pandas as pd

        rows = pd.DataFrame(columns=tables.schema("sanitizer", study.size_names).names)
    tables.write(rows, args.out, "sanitizer", study.size_names)
    return 0


def cmd_roofline(args) -> int:
    import pandas as pd

    from kernelbook import tables
    from kernelbook.profile import ncu as profile

    project = _project(args)
    study = project.study(args.study)
    prof = tables.read(args.profile)
    meas = tables.read(args.measurements) if args.measurements else None
    dev = tables.read(args.device) if args.device else None
    problem = problems.get(study.problem)
    out = profile.roofline(
        prof, meas, dev, study.size_names, problem.flops, tensor_flops=problem.peak != "fp32"
    )
    if out.empty:  # nothing profiled (every variant failed or was not run)
        out = pd.DataFrame(columns=tables.schema("roofline", study.size_names).names)
    tables.write(out, args.out, "roofline", study.size_names)
    return 0


def cmd_sanitize_gate(args) -> int:
    from kernelbook import tables
    from kernelbook.profile import sanitize

    table = tables.read(args.table)
    project = _project(args)
    study = _load_study(args, project, args.study)
    problems_found = sanitize.gate(table, args.study, {v.id: v.expect for v in study.variants})
    if problems_found:
        raise SanitizerFindings(
            f"{args.study}: compute-sanitizer findings not marked as known (add known_findings "
            "with the reason to the variant's config entry if they are understood):\n  "
            + "\n  ".join(problems_found)
        )
    known = int((table["verdict"] == "known").sum())
    Path(args.out).write_text(
        f"{args.study}: {table['variant'].nunique()} variants x {table['tool'].nunique()} tools "
        f"clean ({known} known findings)\n"
    )
    return 0


class SanitizerFindings(RuntimeError):
    """A study has sanitizer findings its config does not explain."""


class GateFailed(RuntimeError):
    """A study has failures its config does not declare (``expect:``)."""


def cmd_gate(args) -> int:
    """The bench gate (or, without a GPU, the build gate) of one study."""
    from kernelbook import gate, tables

    project = _project(args)
    study = _load_study(args, project, args.study)
    expects = {v.id: v.expect for v in study.variants}

    def read(path):
        return tables.read(path) if path else None

    found = gate.failures(
        study.name,
        expects,
        build=read(args.build),
        measurements=read(args.measurements),
        profile=read(args.profile),
    )
    where = args.measurements or args.build
    text = gate.summary(study.name, found, where)
    if any(not f.expected for f in found):
        raise GateFailed(text)
    expected = [f for f in found if f.expected]
    Path(args.out).write_text(
        f"{study.name}: no unexpected failures"
        + (
            f"; {len(expected)} expected failure(s) of negative controls:\n  "
            + "\n  ".join(f.line() for f in expected)
            if expected
            else ""
        )
        + "\n"
    )
    _eprint(Path(args.out).read_text().strip())
    return 0


def cmd_check(args) -> int:
    from kernelbook.report import stale

    return stale.check(_project(args), args.worklogs)


def cmd_device(args) -> int:
    from kernelbook import gpu
    from kernelbook.measure import device

    project = _project(args)
    slot = gpu.acquire_slot()
    device.write_device_table(project, Path(args.out), slot.uuid)
    return 0


def cmd_gather(args) -> int:
    from kernelbook import tables, tune
    from kernelbook.report import regimes

    # measurements: a tuned variant's confirmed rows replace its selection rows
    steps = [tune.confirmed] if args.table == "measurements" else []
    if args.device or args.meta:
        if not (args.device and args.meta) or args.table != "measurements":
            raise SystemExit("kernelbook gather: --device and --meta go together, on measurements")
        meta = json.loads(Path(args.meta).read_text())
        device = tables.read(args.device)
        steps.append(lambda df: regimes.annotate(df, device, meta))

    def post(df):
        for step in steps:
            df = step(df)
        return df

    try:
        tables.gather(args.inputs, args.out, args.table, post if steps else None)
    except regimes.RegimesError as e:
        raise SystemExit(f"kernelbook gather: {args.device}: {e}") from None
    return 0


def cmd_stages(args) -> int:
    from kernelbook import tables
    from kernelbook.report import stages

    tables.write(stages.table(args.inputs, args.study), args.out, "stages")
    return 0


def cmd_select(args) -> int:
    import pandas as pd

    from kernelbook import tables, tune

    project, study, variant = _study_variant(args)
    frames = [tables.read(p) for p in args.inputs]
    out = tune.select(pd.concat(frames, ignore_index=True), variant.id)
    tables.write(out, args.out, "measurements", study.size_names)
    return 0


# -- report verbs (kernelbook.report): publish, render, index, meta, before-after ----------
def cmd_publish(args) -> int:
    from kernelbook.report import publish

    return publish.publish_pairs(
        args.results, args.worklogs, args.pairs, args.render, args.configfile, args.why_none
    )


def cmd_render(args) -> int:
    from kernelbook.report import publish

    return publish.render_pairs(args.worklogs, args.pairs, args.configfile)


def cmd_index(args) -> int:
    from kernelbook.report import index

    print(index.write_index(args.worklogs))
    return 0


def cmd_meta(args) -> int:
    from kernelbook.report import meta

    return meta.write_study_meta(_project(args), args.study, args.out)


def cmd_before_after(args) -> int:
    from kernelbook.report import quality

    return quality.write_before_after(args.rev, args.folders)


# -- end of report verbs ---------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kernelbook", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--configfile", default="config/config.yaml")
    p.add_argument(
        "--settings", help="JSON overriding keys of the config file (the DAG passes its own)"
    )
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("list", help="studies, variants and sizes")
    s.add_argument("study", nargs="?")
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("compile", help="compile one variant, report resources and SASS")
    s.add_argument("study")
    s.add_argument("variant")
    s.add_argument("--cubin", required=True)
    s.add_argument("--build", help="build table row (Parquet)")
    s.add_argument("--sass", help="SASS opcode histogram (Parquet)")
    s.add_argument(
        "--record-failure",
        action="store_true",
        help="when nvcc fails: write a failed build row, an empty SASS table and an empty "
        "cubin, and exit 0 (the pipeline's compile jobs; the bench gate reports it)",
    )
    s.set_defaults(fn=cmd_compile)

    s = sub.add_parser("bench", help="check, then time one variant beside its baseline")
    s.add_argument("study")
    s.add_argument("variant")
    s.add_argument(
        "--size", action="append", help="e.g. 4096, 4096x4096x1000 or M=..,N=..,K=..; repeatable"
    )
    s.add_argument("--cubin", help="a compiled cubin (default: compile now)")
    s.add_argument("--build-table", help="the cubin's build table row, for provenance")
    s.add_argument(
        "--tuned-table",
        help="for an autotuned variant: its tuned table; the winner at the headline tune size "
        "runs at the study's other sizes",
    )
    s.add_argument("--build-dir", help="for an autotuned variant: where its candidates' builds are")
    s.add_argument("--out", help="measurements table (Parquet)")
    s.add_argument("--samples-out", help="every timed sample (samples table, Parquet)")
    s.add_argument(
        "--record-failure",
        "--tolerate-failure",
        dest="record_failure",
        action="store_true",
        help="record a failing variant as failed rows (failure kind and message) and exit 0 "
        "instead of failing (the pipeline's jobs; the bench gate reports them)",
    )
    s.set_defaults(fn=cmd_bench)

    s = sub.add_parser("launch", help="launch one variant at one size (for ncu, compute-sanitizer)")
    s.add_argument("study")
    s.add_argument("variant")
    s.add_argument("--size", required=True)
    s.add_argument("--cubin", help="a compiled cubin (default: compile now)")
    s.add_argument("--repeat", type=int, default=1)
    s.add_argument("--exact", action="store_true", help="exact-size allocations, no guard bands")
    s.add_argument("--check", action="store_true", help="check the first launch's result")
    s.set_defaults(fn=cmd_launch)

    for name, fn, help_ in (
        ("profile", cmd_profile, "Nsight Compute metrics of one variant at the profile sizes"),
        ("sanitize", cmd_sanitize, "compute-sanitizer tools on one variant at a small size"),
    ):
        s = sub.add_parser(name, help=help_)
        s.add_argument("study")
        s.add_argument("variant")
        s.add_argument("--out", required=True)
        s.add_argument("--build-dir", required=True, help="results/build/<study>")
        s.add_argument("--cubin", help="default: <build-dir>/<variant>/kernel.cubin")
        s.add_argument("--tuned-table", help="for an autotuned variant: its tuned table")
        s.add_argument(
            "--bench-table",
            help="the variant's bench table: sizes it failed at are not run again "
            "(a hang or a failed compile: not sanitized at all)",
        )
        if name == "profile":
            s.add_argument("--reports", required=True, help="folder for the .ncu-rep files")
        s.set_defaults(fn=fn)

    s = sub.add_parser("roofline", help="derive the roofline table from a study's profile")
    s.add_argument("study")
    s.add_argument("--profile", required=True)
    s.add_argument("--measurements")
    s.add_argument("--device")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_roofline)

    s = sub.add_parser(
        "sanitize-gate", help="fail on sanitizer findings the config does not explain"
    )
    s.add_argument("study")
    s.add_argument("table")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_sanitize_gate)

    s = sub.add_parser(
        "gate", help="fail, with one line per failure, on failures the config does not expect"
    )
    s.add_argument("study")
    s.add_argument("--build", help="the study's build table")
    s.add_argument("--measurements", help="the study's measurements table (with a GPU)")
    s.add_argument("--profile", help="the study's profile table (with a GPU)")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_gate)

    s = sub.add_parser("check", help="published worklogs stale against current sources (exit 1)")
    s.add_argument("--worklogs", default="worklogs")
    s.set_defaults(fn=cmd_check)

    s = sub.add_parser("device", help="NVML facts and measured ceilings of the GPU")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_device)

    s = sub.add_parser("gather", help="concatenate per-job tables")
    s.add_argument("table")
    s.add_argument("out")
    s.add_argument("inputs", nargs="*")
    s.add_argument(
        "--device",
        help="measurements: add the three-term prediction (kernelbook.report.regimes) from this "
        "device table",
    )
    s.add_argument("--meta", help="with --device: the study.json holding each variant's predict")
    s.set_defaults(fn=cmd_gather)

    s = sub.add_parser("stages", help="a study's Snakemake benchmark files as one table")
    s.add_argument("study")
    s.add_argument("out")
    s.add_argument("inputs", nargs="*")
    s.set_defaults(fn=cmd_stages)

    s = sub.add_parser("select", help="autotuning: pick the best candidate per size")
    s.add_argument("study")
    s.add_argument("variant")
    s.add_argument("--out", required=True)
    s.add_argument("inputs", nargs="+")
    s.set_defaults(fn=cmd_select)

    # -- report verbs (kernelbook.report) ------------------------------------------------------
    s = sub.add_parser("publish", help="copy results/<gpu>/<study> into worklogs/, re-index")
    s.add_argument("--results", default="results")
    s.add_argument("--worklogs", default="worklogs")
    s.add_argument("--why-none", default="", help="said when there is nothing to publish")
    s.add_argument(
        "--render",
        action="store_true",
        help="render the worklog from the results' tables first, without Snakemake (for "
        "results measured on a GPU host and brought here); the page is the one rule worklog "
        "makes, the study's own notebook figures included",
    )
    s.add_argument("pairs", nargs="*", metavar="GPU/STUDY")
    s.set_defaults(fn=cmd_publish)

    s = sub.add_parser("render", help="render published pages again from their data/")
    s.add_argument("--worklogs", default="worklogs")
    s.add_argument("pairs", nargs="+", metavar="GPU/STUDY")
    s.set_defaults(fn=cmd_render)

    s = sub.add_parser("index", help="regenerate worklogs/README.md")
    s.add_argument("--worklogs", default="worklogs")
    s.set_defaults(fn=cmd_index)

    s = sub.add_parser("meta", help="write study.json: what a worklog needs from the config")
    s.add_argument("study")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_meta)

    s = sub.add_parser(
        "before-after", help="a study's published measurements against those at a git revision"
    )
    s.add_argument("rev")
    s.add_argument("folders", nargs="+", metavar="worklogs/GPU/STUDY")
    s.set_defaults(fn=cmd_before_after)
    # -- end of report verbs
    return p


def main(argv=None) -> int:
    from kernelbook.build.nvcc import CompileError
    from kernelbook.gpu import NoGpu
    from kernelbook.measure.bench import Crash, KernelFailure
    from kernelbook.measure.timing import DeviceFault, Hang, TimingError
    from kernelbook.problems.base import CheckError
    from kernelbook.profile.ncu import ProfileError
    from kernelbook.profile.sanitize import SanitizeError
    from kernelbook.tables import TableError

    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except (Hang, Crash, DeviceFault) as e:
        # The device is unusable (a kernel still running, or a dead context): say why and
        # leave without the clean-up that would wait on it.
        _eprint(f"kernelbook: error: {e}")
        sys.stderr.flush()
        os._exit(1)
    except (
        cfg.ConfigError,
        CompileError,
        KernelFailure,
        CheckError,
        TableError,
        NoGpu,
        ProfileError,
        SanitizeError,
        SanitizerFindings,
        GateFailed,
        TimingError,
    ) as e:
        _eprint(f"kernelbook: error: {e}")
        return 1
