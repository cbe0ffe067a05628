"""kernelbook's command line: the rules call it, and it is the quick loop outside the DAG.

The quick loop:
  kernelbook list [STUDY]                     studies (any file in the study folder), variants
  kernelbook compile STUDY VARIANT ...        nvcc or Triton: resources and SASS histogram
  kernelbook bench STUDY VARIANT... [--size]  check, then time beside the baselines
  kernelbook launch STUDY VARIANT --size S    one launch (what ncu and compute-sanitizer run)
  kernelbook profile STUDY VARIANT --size S --reports DIR --out T
                                              Nsight Compute at those sizes (compiled now);
                                              several variants, or --all: one ncu run
Published worklogs:
  kernelbook check | publish | render | index | before-after | compare
The rules' jobs: profile, sanitize, roofline, device, gather, select, stages, meta, gate,
sanitize-gate (each is one function of the library). A run's GPU time: kernelbook ledger;
the GPUs its jobs may take here: kernelbook gpus.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from kernelbook import config as cfg
from kernelbook import jobserver, problems

# The verbs run in a child of the job server: the GPU jobs, whose start-up (torch, CuPy,
# Triton) is longer than their measurement.
SERVED = frozenset({"bench", "device", "profile", "sanitize"})


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
        s = _load_study(args, project, name)  # in the run's studies or not
        p = problems.get(s.problem)
        print(
            f"{name}: {s.problem} {s.dtype}, baseline {s.baseline}, {len(s.sizes)} sizes: "
            + ", ".join(p.label(z) for z in s.sizes)
        )
        for v in s.variants:
            extra = f"  [{len(v.candidates)} candidates]" if v.is_tuned else ""
            print(f"  {v.id:28s} {v.entry:28s} {v.says}{extra}")
    return 0


def _sizes(args) -> list[str] | None:
    return list(args.size) if args.size else None


def cmd_compile(args) -> int:
    from kernelbook.build.job import compile_job

    project, study, variant = _study_variant(args)
    return compile_job(
        project, study, variant, Path(args.cubin), args.build, args.sass, args.record_failure
    )


# bench options that name one variant's files: refused with several variants
ONE_VARIANT_ONLY = ("cubin", "build_table", "tuned_table")


def cmd_bench(args) -> int:
    from kernelbook.measure.job import bench_job

    if len(args.variant) > 1 or args.candidates:
        from kernelbook.measure.job import bench_variants

        one = [f"--{n.replace('_', '-')}" for n in ONE_VARIANT_ONLY if getattr(args, n)]
        if one:
            raise cfg.ConfigError(f"bench: {', '.join(one)} is for one variant, not several")
        project = _project(args)
        study = _load_study(args, project, args.study)
        variants = [study.variant(v) for v in args.variant]
        if args.candidates:
            # the autotuned ones through their candidates; a plain one named beside them (the
            # step they are compared with) as itself, in the order given
            if not any(v.is_tuned for v in variants):
                raise cfg.ConfigError(
                    f"bench --candidates: {study.name}/{', '.join(args.variant)} is not "
                    "autotuned (no candidates to bench)"
                )
            variants = [
                w
                for v in variants
                for w in (map(study.variant, v.candidates) if v.is_tuned else [v])
            ]
        return bench_variants(
            project, study, variants, _sizes(args), args.out, args.samples_out,
            args.record_failure, args.build_dir,
        )  # fmt: skip
    args.variant = args.variant[0]
    project, study, variant = _study_variant(args)
    return bench_job(
        project, study, variant, _sizes(args), cubin=args.cubin, build_table=args.build_table,
        out=args.out, samples_out=args.samples_out, tuned_table=args.tuned_table,
        build_dir=args.build_dir, record_failure=args.record_failure,
    )  # fmt: skip


def cmd_launch(args) -> int:
    """Launch one variant at each size a few times: the target of ncu and compute-sanitizer."""
    from kernelbook.launch.process import launch_variant

    if args.plan:
        from kernelbook.launch.process import launch_plan, read_plan

        if args.variant or args.size or args.cubin:
            raise cfg.ConfigError("launch --plan: the plan names the variants, sizes and cubins")
        project = _project(args)
        study = _load_study(args, project, args.study)
        entries = read_plan(study, args.plan)
        return launch_plan(
            project, study, entries, args.repeat, args.check, args.exact, args.tag_launches
        )
    if not (args.variant and args.size):
        raise cfg.ConfigError("launch: name a variant and --size (or give --plan)")
    project, study, variant = _study_variant(args)
    return launch_variant(
        project, study, variant, args.size, args.cubin, args.repeat, args.check, args.exact
    )


def _several(args, verb: str):
    """(project, study, variants; None for --all) where the command names several variants
    or --all, which take their builds and tables from folders only; None where it names one
    (then ``args.variant`` is that one)."""
    if not (args.all or len(args.variant) > 1):
        if not args.variant:
            raise cfg.ConfigError(f"{verb}: name a variant, or --all for every one of the study")
        args.variant = args.variant[0]
        return None
    if (args.all and args.variant) or args.cubin or args.tuned_table or args.bench_table:
        raise cfg.ConfigError(
            f"{verb} of several variants (or --all): their builds, bench and tuned tables "
            "from --build-dir, --bench-dir and --tuned-dir (not --cubin, --tuned-table or "
            "--bench-table; not --all and variants)"
        )
    project = _project(args)
    study = _load_study(args, project, args.study)
    return project, study, [study.variant(v) for v in args.variant] if args.variant else None


def cmd_profile(args) -> int:
    """ncu on one variant or several. The quick loop: --size, and without --build-dir or
    --cubin each compiled here first (the profile job itself builds nothing, holds the GPU)."""
    import tempfile

    from kernelbook.build.job import compile_now
    from kernelbook.profile.job import profile_job, profile_study_job, quick_sizes

    several = _several(args, "profile")
    if several:  # named with no folders, they are compiled now (compile_now), as one is
        project, study, variants = several
        return profile_study_job(
            project, study, args.out, args.reports, args.build_dir, args.bench_dir,
            args.tuned_dir, _sizes(args), variants, build_now=compile_now,
        )  # fmt: skip
    project, study, variant = _study_variant(args)
    sizes = quick_sizes(study, variant, _sizes(args), args.build_dir)
    own_build = args.build_dir is None and args.cubin is None
    if own_build and not (args.tuned_table or args.bench_table):  # one variant as several are:
        return profile_study_job(  # compiled now, profiled beside the study's baselines
            project, study, args.out, args.reports, None, None, None, _sizes(args), [variant],
            build_now=compile_now,
        )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        cubin = args.cubin
        if own_build:
            cubin = compile_now(project, study, variant, Path(tmp) / "kernel.cubin").cubin
        return profile_job(
            project, study, variant, args.out, args.reports, args.build_dir,
            cubin=cubin, tuned_table=args.tuned_table, bench_table=args.bench_table,
            sizes=sizes,
        )  # fmt: skip


def cmd_sanitize(args) -> int:
    from kernelbook.profile.job import sanitize_job, sanitize_study_job

    several = _several(args, "sanitize")
    if several:
        project, study, variants = several
        return sanitize_study_job(
            project, study, args.out, args.build_dir, args.bench_dir, args.tuned_dir, variants
        )
    project, study, variant = _study_variant(args)
    return sanitize_job(
        project, study, variant, args.out, args.build_dir,
        cubin=args.cubin, tuned_table=args.tuned_table, bench_table=args.bench_table,
    )  # fmt: skip


def cmd_roofline(args) -> int:
    from kernelbook.profile.job import roofline_job

    study = _project(args).study(args.study)
    return roofline_job(study, args.profile, args.out, args.measurements, args.device)


def cmd_sanitize_gate(args) -> int:
    from kernelbook.profile.job import sanitize_gate

    project = _project(args)
    return sanitize_gate(_load_study(args, project, args.study), args.table, args.out)


def cmd_gate(args) -> int:
    """The bench gate (or, without a GPU, the build gate) of one study."""
    from kernelbook import gate

    project = _project(args)
    study = _load_study(args, project, args.study)
    return gate.gate_job(study, args.out, args.build, args.measurements, args.profile)


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


def cmd_loops(args) -> int:
    from kernelbook import tables
    from kernelbook.build import loops

    df = loops.table(args.study, [Path(c) for c in args.cubins])
    tables.write(df, args.out, "loops")
    shown = df.drop_duplicates("variant")
    print(f"{args.study}: the hot loop of {len(shown)} of {len(args.cubins)} cubin(s)")
    return 0


def cmd_gpus(args) -> int:
    """The GPUs this machine's jobs may take, one UUID a line (NVML, narrowed by
    CUDA_VISIBLE_DEVICES as the jobs narrow it): what a script sizes its run by."""
    from kernelbook import gpu

    info, why = gpu.detect()
    if info is None:
        print(f"kernelbook gpus: no GPU to run on: {why}", file=sys.stderr)
        return 1
    print("\n".join(info.uuids))
    return 0


def cmd_gather(args) -> int:
    from kernelbook import tables, tune
    from kernelbook.report import prediction

    # measurements: a tuned variant's confirmed rows replace its selection rows
    steps = [tune.confirmed] if args.table == "measurements" else []
    if args.device or args.meta:
        if not (args.device and args.meta) or args.table != "measurements":
            raise SystemExit("kernelbook gather: --device and --meta go together, on measurements")
        meta = json.loads(Path(args.meta).read_text())
        device = tables.read(args.device)
        steps.append(lambda df: prediction.annotate(df, device, meta))

    def post(df):
        for step in steps:
            df = step(df)
        return df

    try:
        tables.gather(args.inputs, args.out, args.table, post if steps else None)
    except prediction.RegimesError as e:
        raise SystemExit(f"kernelbook gather: {args.device}: {e}") from None
    return 0


def cmd_stages(args) -> int:
    from kernelbook import tables
    from kernelbook.report import pipeline_cost

    tables.write(pipeline_cost.table(args.inputs, args.study), args.out, "stages")
    return 0


def cmd_ledger(args) -> int:
    from kernelbook import ledger

    return ledger.main(args)


def cmd_select(args) -> int:
    import pandas as pd

    from kernelbook import tables, tune

    project, study, variant = _study_variant(args)
    frames = [tables.read(p) for p in args.inputs]
    out = tune.select(pd.concat(frames, ignore_index=True), variant.id)
    tables.write(out, args.out, "measurements", study.size_names)
    return 0


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

    s = sub.add_parser("bench", help="check, then time variants beside their baseline")
    s.add_argument("study")
    s.add_argument(
        "variant",
        nargs="+",
        help="a variant or candidate; several (plain variants or candidates) run one after "
        "another in one job, into one table",
    )
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
    s.add_argument(
        "--build-dir",
        help="where the builds are (<dir>/<id>/kernel.cubin and build.parquet): an autotuned "
        "variant's candidates, or the variants of a bench of several",
    )
    s.add_argument(
        "--candidates",
        action="store_true",
        help="bench every candidate of the autotuned variants named, in one job (one GPU "
        "lock, one table; what the pipeline's tune jobs run); a plain variant named beside "
        "them is benched as itself",
    )
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
    s.add_argument("variant", nargs="?")
    s.add_argument("--size", action="append", help="a size; several: launched in turn")
    s.add_argument("--cubin", help="a compiled cubin (default: compile now)")
    s.add_argument(
        "--plan",
        help="a JSON list of {variant, cubin, sizes}: several variants launched in turn in "
        "this one process (one ncu run of a study)",
    )
    s.add_argument("--repeat", type=int, default=1, help="launches at each size")
    s.add_argument("--exact", action="store_true", help="exact-size allocations, no guard bands")
    s.add_argument("--check", action="store_true", help="check the first launch's result")
    s.add_argument(
        "--tag-launches",
        action="store_true",
        help="each launch in an NVTX range of its own, kernelbook_launch:<i>, inside the usual "
        "one (a ranged ncu run of a --plan tells the launches' kernels apart by it)",
    )
    s.set_defaults(fn=cmd_launch)

    for name, fn, help_ in (
        ("profile", cmd_profile, "Nsight Compute on a variant (or --all) at the profile sizes"),
        ("sanitize", cmd_sanitize, "compute-sanitizer tools on a variant (or --all), small size"),
    ):
        s = sub.add_parser(name, help=help_)
        s.add_argument("study")
        s.add_argument("variant", nargs="*", help="one, or several run in one process a tool")
        s.add_argument("--out", required=True)
        build_help = "the study's build folder (results/build/<study>)"
        if name == "profile":
            build_help += "; without it or --cubin, the variant is compiled now"
        s.add_argument("--build-dir", required=name == "sanitize", help=build_help)
        s.add_argument("--cubin", help="default: <build-dir>/<variant>/kernel.cubin")
        s.add_argument("--tuned-table", help="for an autotuned variant: its tuned table")
        s.add_argument(
            "--bench-table",
            help="the variant's bench table: sizes it failed at are not run again "
            "(a hang or a failed compile: not sanitized at all)",
        )
        s.add_argument(
            "--all",
            action="store_true",
            help=f"every variant of the study together (the pipeline's {name} job): with "
            "--build-dir, --bench-dir and, for autotuned variants, --tuned-dir",
        )
        s.add_argument("--bench-dir", help="several or --all: the variants' bench tables")
        s.add_argument("--tuned-dir", help="several or --all: the tuned variants' tuned tables")
        if name == "profile":
            s.add_argument("--reports", required=True, help="folder for the .ncu-rep files")
            s.add_argument(
                "--size",
                action="append",
                help="a size to profile instead of the study's profile sizes (the quick "
                "loop); repeatable",
            )
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

    s = sub.add_parser("loops", help="each compiled variant's hot loop, from its SASS")
    s.add_argument("study")
    s.add_argument("out", help="the loops table (Parquet)")
    s.add_argument("cubins", nargs="*", help="results/build/<study>/<variant>/kernel.cubin ...")
    s.set_defaults(fn=cmd_loops)

    s = sub.add_parser("gpus", help="the GPUs jobs may take here, one UUID a line (NVML)")
    s.set_defaults(fn=cmd_gpus)

    s = sub.add_parser("gather", help="concatenate per-job tables")
    s.add_argument("table")
    s.add_argument("out")
    s.add_argument("inputs", nargs="*")
    s.add_argument(
        "--device",
        help="measurements: add the three-term prediction (kernelbook.report.prediction) from this "
        "device table",
    )
    s.add_argument("--meta", help="with --device: the study.json holding each variant's predict")
    s.set_defaults(fn=cmd_gather)

    s = sub.add_parser("stages", help="a study's Snakemake benchmark files as one table")
    s.add_argument("study")
    s.add_argument("out")
    s.add_argument("inputs", nargs="*")
    s.set_defaults(fn=cmd_stages)

    s = sub.add_parser(
        "ledger", help="a run's GPU time from its ledger: held exclusive, shared, idle, by job"
    )
    s.add_argument("ledger", help="the file $KERNELBOOK_GPU_LEDGER named during the run")
    s.add_argument("--top", type=int, default=8, help="longest holds to list")
    s.add_argument("--check", action="store_true", help="exit 1 on overlapping holds or rows")
    s.add_argument("--tables", nargs="*", default=[], help="with --check: study table folders")
    s.set_defaults(fn=cmd_ledger)

    s = sub.add_parser("select", help="autotuning: pick the best candidate per size")
    s.add_argument("study")
    s.add_argument("variant")
    s.add_argument("--out", required=True)
    s.add_argument("inputs", nargs="+")
    s.set_defaults(fn=cmd_select)

    from kernelbook.report import commands as report_commands

    report_commands.add_parsers(sub)  # publish, render, index, meta, before-after, compare
    return p


def user_errors() -> tuple[type[Exception], ...]:
    """The errors a command reports in one line (kernelbook: error: ...), exit status 1."""
    from kernelbook.build.nvcc import CompileError
    from kernelbook.gate import GateFailed
    from kernelbook.gpu import NoGpu
    from kernelbook.launch.kernel import KernelFailure
    from kernelbook.measure.timing import TimingError
    from kernelbook.problems.base import CheckError
    from kernelbook.profile.job import SanitizerFindings
    from kernelbook.profile.ncu import ProfileError
    from kernelbook.profile.sanitize import SanitizeError
    from kernelbook.tables import TableError

    return (
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
    )


def main(argv=None) -> int:
    from kernelbook.launch.kernel import Crash, DeviceFault, Hang

    args = parser().parse_args(argv)
    if args.command in SERVED and not jobserver.IN_CHILD:
        # a GPU job: run it in a child of the job server (kernelbook.jobserver), which has
        # paid for the imports once; where there is none, here
        status = jobserver.run(sys.argv[1:] if argv is None else list(argv))
        if status is not None:
            return status
    try:
        return args.fn(args)
    except BrokenPipeError:  # the reader left (`kernelbook list | head`): nothing went wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (Hang, Crash, DeviceFault) as e:
        # The device is unusable (a kernel still running, or a dead context): say why and
        # leave without the clean-up that would wait on it.
        _eprint(f"kernelbook: error: {e}")
        sys.stderr.flush()
        os._exit(1)
    except user_errors() as e:
        _eprint(f"kernelbook: error: {e}")
        return 1
