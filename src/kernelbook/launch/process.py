"""A variant launched as a process of its own (``kernelbook launch``): what ncu and
compute-sanitizer run, inside an NVTX range, with a limit on each launch."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelbook import gpu, problems
from kernelbook.build.job import compile_now, row_smem, sibling_build_row
from kernelbook.config import ConfigError, Project, Study, Variant, tool_limit
from kernelbook.launch.kernel import Hang, kernel_launcher, load_kernel, wait_event
from kernelbook.layout import BASELINE_PREFIX

# The NVTX range every launch runs in: ncu's --nvtx-include selects it (profile.ncu).
NVTX_RANGE = "kernelbook_variant"
# Inside it, where asked (launch --tag-launches), a range naming the launch's place in its
# process (0, 1, ... in plan order): a report of several variants' launches, each of any
# number of kernels (a torch variant's), then tells which launch each kernel belongs to
# (profile.ncu_read.read_report_by_launch).
NVTX_LAUNCH = "kernelbook_launch:"


@dataclass(frozen=True)
class BaselineRun:
    """A study's baseline (torch.matmul for cuBLAS, say) run where a variant would be, so
    that ncu profiles it as it profiles a torch variant: every kernel inside the launch's
    NVTX range, summed. Its id is BASELINE_PREFIX and its name."""

    name: str
    kind: str = "baseline"
    entry: None = None
    then: tuple = ()
    computes: None = None
    source: None = None

    @property
    def id(self) -> str:
        return BASELINE_PREFIX + self.name

    def unmet(self, sizes) -> list[str]:
        return []  # a baseline runs at every size of its study


def launch_command(
    project, study, variant, size_label: str | Sequence[str], cubin, *extra: str
) -> list[str]:
    """`kernelbook launch` for one variant at one size, or at several in turn (one process,
    one kernel load): what ncu and compute-sanitizer run."""
    settings = json.dumps({**project.settings, "studies": [study.name]})
    labels = [size_label] if isinstance(size_label, str) else list(size_label)
    sizes = [arg for label in labels for arg in ("--size", label)]
    return [
        sys.executable,
        "-m",
        "kernelbook",
        "--settings",
        settings,
        "launch",
        study.name,
        variant.id,
        *sizes,
        "--cubin",
        str(cubin),
        *extra,
    ]


def nvtx_range():
    """A context manager pushing an NVTX range: CuPy's where it has NVTX (a CUDA variant's
    launch then never imports torch, 2-3 s of every ncu and compute-sanitizer run), else
    torch's."""
    try:
        from cupy.cuda import nvtx

        if nvtx.available:

            @contextlib.contextmanager
            def cupy_range(name):
                nvtx.RangePush(name)
                try:
                    yield
                finally:
                    nvtx.RangePop()

            return cupy_range
    except Exception:  # noqa: BLE001 - no CuPy NVTX: torch's below
        pass
    try:
        import torch

        return torch.cuda.nvtx.range
    except Exception:
        return lambda name: contextlib.nullcontext()


def _eprint(*a):
    print(*a, file=sys.stderr, flush=True)


def wait_or_leave(cp, limit: float, where: str) -> None:
    """Wait for the launch, at most ``limit`` seconds (timeouts.launch_s), through the
    timer's own watch (launch.kernel.wait_event): a hung kernel cannot be stopped from
    inside, so the process leaves (exit 124) and takes it along; a fault is raised."""
    done = cp.cuda.Event(disable_timing=True)
    done.record()
    try:
        wait_event(done, limit, where, "timeouts.launch_s")
    except Hang as e:
        _eprint(f"kernelbook: error: {e}")
        sys.stderr.flush()
        os._exit(124)
    cp.cuda.runtime.deviceSynchronize()  # raises the launch's error, if any


def plan_command(project, study, plan_file: Path, *extra: str) -> list[str]:
    """`kernelbook launch STUDY --plan FILE`: several variants, each at its sizes, in one
    process (write_plan's file): what one ncu run of a whole study runs."""
    settings = json.dumps({**project.settings, "studies": [study.name]})
    return [sys.executable, "-m", "kernelbook", "--settings", settings, "launch", study.name,
            "--plan", str(plan_file), *extra]  # fmt: skip


def write_plan(path: Path, entries) -> Path:
    """A launch plan: ``entries`` of (variant id, cubin, [size label, ...]), in launch order;
    a baseline's entry is its BaselineRun id, with no cubin."""
    path.write_text(
        json.dumps([{"variant": v, "cubin": str(c), "sizes": list(s)} for v, c, s in entries])
    )
    return path


def read_plan(study: Study, path: str | Path) -> list[tuple[Variant, str, list[str]]]:
    """A launch plan's entries as (variant, cubin, size labels); one ConfigError naming the
    file for one that is not a plan of this study's variants."""
    try:
        raw = json.loads(Path(path).read_text())
        entries = [(_planned(study, e["variant"]), str(e["cubin"]), list(e["sizes"])) for e in raw]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"launch --plan {path}: not a launch plan ({e})") from None
    if not entries or any(not sizes for _, _, sizes in entries):
        raise ConfigError(f"launch --plan {path}: every entry needs a variant, a cubin and sizes")
    return entries


def _planned(study: Study, vid: str):
    """A plan entry's variant, or the BaselineRun of one of the study's baselines."""
    if not vid.startswith(BASELINE_PREFIX):
        return study.variant(vid)
    name = vid[len(BASELINE_PREFIX) :]
    known = (study.baseline, *study.extra_baselines)
    if name not in known:
        raise ConfigError(f"{study.name}: no baseline '{name}' (baselines: {', '.join(known)})")
    return BaselineRun(name)


def launch_variant(
    project: Project,
    study: Study,
    variant: Variant,
    size: str | Sequence[str],
    cubin: str | None = None,
    repeat: int = 1,
    check: bool = False,
    exact: bool = False,
) -> int:
    """Launch one variant at each size in turn, ``repeat`` times a size (checked once a size
    with ``check``), the kernel loaded once: ncu sees the sizes' launches in this order."""
    labels = [size] if isinstance(size, str) else list(size)
    return launch_plan(project, study, [(variant, cubin, labels)], repeat, check, exact)


def launch_plan(
    project: Project, study: Study, entries, repeat=1, check=False, exact=False, tag=False
) -> int:
    """Launch each entry's variant ((variant, cubin or None, size labels)) at its sizes in
    turn, in the entries' order: one process, one CUDA context for them all. With ``tag``
    each launch runs in an NVTX range of its own too, NVTX_LAUNCH and its number."""
    problem = problems.get(study.problem)
    try:
        parsed = [[problem.parse_size(label) for label in labels] for _, _, labels in entries]
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if os.environ.get(gpu.SLOT_HELD_ENV) != "1":
        gpu.acquire_slot()  # a parent (profile, sanitize) that holds the GPU sets the flag
    import cupy as cp

    if exact:
        # Plain cudaMalloc per array, no guard bands: compute-sanitizer's memcheck then sees
        # an access past an array's end as outside its allocation.
        cp.cuda.set_allocator(None)
    limit = tool_limit(project.settings, "launch_s")
    nvtx = nvtx_range()
    # each launch's NVTX_LAUNCH range, or none
    count = iter(range(sum(len(s) for s in parsed) * repeat)) if tag else None
    for (variant, cubin, _), sizes_list in zip(entries, parsed, strict=True):
        if isinstance(variant, BaselineRun):
            for sizes in sizes_list:
                _launch_baseline(project, study, variant, sizes, repeat, cp, limit, nvtx, count)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            if cubin:
                cubin_path = Path(cubin)
                smem = row_smem(sibling_build_row(cubin_path)) if variant.kind == "triton" else None
            else:
                info = compile_now(project, study, variant, Path(tmp) / "kernel.cubin")
                cubin_path, smem = info.cubin, info.smem
            kernel = load_kernel(project.root, study, variant, cubin_path, smem)
            for sizes in sizes_list:
                _launch_size(project, study, variant, kernel, sizes, repeat, check, exact,
                             cp, limit, nvtx, count)  # fmt: skip
            del kernel
    return 0


def _launch_size(
    project, study, variant, kernel, sizes, repeat, check, exact, cp, limit, nvtx, count
):
    problem = problems.get(study.problem)
    case = problem.setup(
        sizes,
        study.dtype,
        study.params,
        project.settings["seed"],
        guard=0 if exact else 64 * 1024,
        computes=variant.computes,
        reference=check,
    )
    if not check:  # the inputs' copies serve the check only: freed, they are no memory for
        case.input_copies = {}  # ncu's replay passes to save and restore, nor for the tools
        cp.get_default_memory_pool().free_all_blocks()
    run, launch = kernel_launcher(kernel, study, variant, sizes, case)
    label = problem.label(sizes)
    where = f"{study.name}/{variant.id} at {label}"
    for i in range(repeat):
        case.reset()
        tagged = (
            nvtx(f"{NVTX_LAUNCH}{next(count)}") if count is not None else contextlib.nullcontext()
        )
        with nvtx(NVTX_RANGE), tagged:  # ncu profiles the kernels inside this range only
            run()
        wait_or_leave(cp, limit, where)
        if check and i == 0:
            tol = study.tolerance or problem.tolerance(sizes, study.dtype)
            r = problem.check(case, tol, where)
            _eprint(f"correct: rel_err {r.rel_err:.2e}")
    geometry = (
        f"grid {launch.grid}, block {launch.block}, smem {launch.smem}"
        if launch
        else "torch's own kernels"
    )
    _eprint(f"{study.name}/{variant.id}: launched {repeat}x at {label}, {geometry}")
    del run, launch, case  # the next size's buffers in their place
    cp.get_default_memory_pool().free_all_blocks()


def _launch_baseline(project, study, base: BaselineRun, sizes, repeat, cp, limit, nvtx, count):
    """The baseline at one size, ``repeat`` times inside the NVTX range: the problem's own
    call (it runs once before, outside the range, as it does when timed: the library's
    set-up and its choice of kernel are not what ncu sees)."""
    problem = problems.get(study.problem)
    case = problem.setup(sizes, study.dtype, study.params, project.settings["seed"])
    run = problem.baseline(case, base.name, study.params).run
    case.input_copies = {}
    cp.get_default_memory_pool().free_all_blocks()
    where = f"{study.name}/{base.id} at {problem.label(sizes)}"
    for _ in range(repeat):
        tagged = (
            nvtx(f"{NVTX_LAUNCH}{next(count)}") if count is not None else contextlib.nullcontext()
        )
        with nvtx(NVTX_RANGE), tagged:
            run()
        wait_or_leave(cp, limit, where)
    _eprint(f"{where}: launched {repeat}x, the library's own kernels")
    del run, case
    cp.get_default_memory_pool().free_all_blocks()
