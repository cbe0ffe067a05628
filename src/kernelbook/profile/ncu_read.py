"""Reading Nsight Compute reports (ncu_report): each profiled kernel's metrics, several
kernels as one, and the launch each kernel of a ranged run belongs to (its NVTX range)."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

from kernelbook.launch.process import NVTX_LAUNCH


class ProfileError(RuntimeError):
    """ncu could not profile the variant, or its report could not be read."""


def ncu_python_dirs() -> list[Path]:
    """Where Nsight Compute keeps its own copy of ncu_report: extras/python beside the ncu
    binary (often reached through a wrapper in cuda/bin), or under the CUDA toolkit."""
    dirs: list[Path] = []
    exe = shutil.which("ncu")
    if exe:
        real = Path(exe).resolve().parent
        dirs.append(real / "extras" / "python")
        dirs += sorted(real.parent.glob("nsight-compute*/extras/python"))
    for root in ("/usr/local/cuda", *sorted(str(p) for p in Path("/usr/local").glob("cuda-*"))):
        dirs += sorted(Path(root).glob("nsight-compute*/extras/python"))
    dirs += sorted(Path("/opt/nvidia/nsight-compute").glob("*/extras/python"))
    return [d for d in dict.fromkeys(dirs) if (d / "ncu_report.py").is_file()]


def import_ncu_report():
    """The ncu_report module: the ncu-report package, else Nsight Compute's own copy."""
    try:
        import ncu_report

        return ncu_report
    except ImportError as e:
        first = e
    for d in ncu_python_dirs():
        sys.path.insert(0, str(d))
        try:
            import ncu_report

            return ncu_report
        except ImportError:
            sys.path.remove(str(d))
    raise ProfileError(
        f"the ncu_report module is missing ({first}): pip install ncu-report, or install "
        "Nsight Compute, whose extras/python holds a copy"
    )


def read_report(path: Path) -> tuple[str, list[tuple[str, float | None, str | None]]]:
    """The first profiled kernel's name and its metrics as (name, value, unit)."""
    ncu_report = import_ncu_report()
    ctx = ncu_report.load_report(str(path))
    if ctx.num_ranges() == 0 or ctx.range_by_idx(0).num_actions() == 0:
        raise ProfileError(f"{path}: the report holds no profiled kernel")
    return _action_metrics(ctx.range_by_idx(0).action_by_idx(0))


def _actions(path: Path) -> list:
    """Every profiled kernel of a report (ncu_report's actions), in the order profiled."""
    ctx = import_ncu_report().load_report(str(path))
    return [
        ctx.range_by_idx(r).action_by_idx(a)
        for r in range(ctx.num_ranges())
        for a in range(ctx.range_by_idx(r).num_actions())
    ]


def read_report_each(path: Path) -> list[tuple[str, list[tuple[str, float | None, str | None]]]]:
    """Every profiled kernel of a report, in the order it was profiled: (name, metrics)."""
    return [_action_metrics(a) for a in _actions(path)]


def read_report_all(path: Path) -> tuple[str, list[tuple[str, float | None, str | None]]]:
    """Every profiled kernel of a report as one (a torch variant's several kernels): the
    kernel names joined by '; ', counters (``.sum`` metrics) summed over the kernels, the
    other metrics (ratios, percentages, launch settings) those of the longest kernel."""
    kernels = read_report_each(path)
    if not kernels:
        raise ProfileError(f"{path}: the report holds no profiled kernel")
    return combine_kernels(kernels)


def launch_of(action) -> int | None:
    """The launch a profiled kernel belongs to: the number of the NVTX_LAUNCH range around
    it (None where there is none)."""
    state = action.nvtx_state()  # None: ncu ran without --nvtx
    for domain in state.domains() if state is not None else ():  # the domains' ids
        for name in state.domain_by_id(domain).push_pop_ranges():
            if name.startswith(NVTX_LAUNCH) and name[len(NVTX_LAUNCH) :].isdigit():
                return int(name[len(NVTX_LAUNCH) :])
    return None


def group_by_launch(actions, launches: int, where: str) -> list[list]:
    """``actions`` (profiled kernels, in order) grouped by their launch, 0 to ``launches`` -
    1; a ProfileError where one belongs to no planned launch or a launch has no kernel."""
    groups: list[list] = [[] for _ in range(launches)]
    for action in actions:
        i = launch_of(action)
        if i is None or not 0 <= i < launches:
            raise ProfileError(f"{where}: kernel {action.name()} is in no planned launch ({i})")
        groups[i].append(action)
    empty = [i for i, g in enumerate(groups) if not g]
    if empty:
        raise ProfileError(f"{where}: no kernel profiled in launch(es) {empty} of {launches}")
    return groups


def read_report_by_launch(path: Path, launches: int, where: str):
    """A report of ``launches`` launches, each of one or more kernels (found by NVTX range:
    torch variants, several-kernel ones): each launch's kernels as one (combine_kernels), in
    launch order."""
    groups = group_by_launch(_actions(path), launches, where)
    return [combine_kernels([_action_metrics(a) for a in g]) for g in groups]


def combine_kernels(kernels):
    """(name, metrics) of several kernels as one: see read_report_all."""

    def duration(k):
        return next((v for n, v, _ in k[1] if n == "gpu__time_duration.sum" and v), 0.0)

    longest = max(kernels, key=duration)
    out: dict[str, tuple[float | None, str | None]] = {n: (v, u) for n, v, u in longest[1]}
    for name in out:
        if name.endswith(".sum"):
            values = [v for _, m in kernels for n, v, _ in m if n == name and v is not None]
            out[name] = (sum(values) if values else None, out[name][1])
    names = "; ".join(dict.fromkeys(k[0] for k in kernels))
    return names, [(n, v, u) for n, (v, u) in sorted(out.items())]


def _action_metrics(action) -> tuple[str, list[tuple[str, float | None, str | None]]]:
    rows = []
    for name in sorted(action.metric_names()):
        metric = action.metric_by_name(name)
        try:
            value = float(metric.value())
        except (TypeError, ValueError):
            continue  # strings (device names, section descriptions) are not metrics
        if math.isnan(value):
            value = None
        rows.append((name, value, metric.unit() or None))
    return action.name(), rows
