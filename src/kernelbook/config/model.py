"""The resolved study model: a Launch, a Variant, a Study, a Project (frozen records)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelbook import problems
from kernelbook.config import expr
from kernelbook.config.limits import (
    NOMINAL_SM_COUNT,
    SM_COUNT,
    cluster_problems,
    launch_problems,
    tma_problems,
)
from kernelbook.config.schema import ConfigError


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    cluster: tuple[int, int, int] = (1, 1, 1)
    # TMA tensor maps, in argument order: (matrix, box rows, box columns, swizzle bytes)
    tma: tuple[tuple[str, int, int, int], ...] = ()

    @property
    def extended(self) -> bool:
        """Launched through cuLaunchKernelEx (a cluster or tensor maps), not CuPy."""
        return self.cluster != (1, 1, 1) or bool(self.tma)


def _size_text(sizes: dict[str, int]) -> str:
    return "size " + ", ".join(f"{k}={v}" for k, v in sizes.items())


@dataclass(frozen=True)
class Variant:
    study: str
    id: str
    source: str  # relative to the repository root
    entry: str
    defines: dict[str, Any]  # resolved values, in declaration order
    nvcc_flags: tuple[str, ...]
    grid: tuple[Any, ...]
    block: tuple[Any, ...]
    smem: Any
    requires: tuple[str, ...]
    says: str = ""
    # the speed this step claims, {against: verdict}: against 'previous', 'baseline' or a
    # variant id, a verdict faster, same or slower; checked on the page, not part of spec()
    claims: dict[str, str] = field(default_factory=dict)
    predict: dict[str, float] = field(default_factory=dict)
    expect: str | None = None
    computes: str | None = None  # an alternative function of the problem (reference kernels)
    known_findings: dict[str, str] = field(default_factory=dict)
    tuned_from: str | None = None  # the tuned variant this candidate belongs to
    tune_point: dict[str, int] = field(default_factory=dict)
    candidates: tuple[str, ...] = ()  # for a tuned variant: its candidates' ids
    tune_sizes: tuple[dict[str, int], ...] = ()
    # further kernels launched after entry, in order: ({entry, grid, block, smem}, ...)
    then: tuple[dict[str, Any], ...] = ()
    workspace: Any = 0  # bytes of a scratch buffer passed after the problem's arguments

    @property
    def entries(self) -> tuple[str, ...]:
        return (self.entry, *(t["entry"] for t in self.then))

    def launches(
        self, sizes: dict[str, int], smem_limit: int | None = None, sm_count: int | None = None
    ) -> list[Launch]:
        """One launch per entry (``entries``), in order."""
        out = [self.launch(sizes, smem_limit, sm_count)]
        for t in self.then:
            more = dataclasses.replace(
                self, entry=t["entry"], grid=tuple(t["grid"]), block=tuple(t["block"]),
                smem=t.get("smem", 0), then=(),
            )  # fmt: skip
            out.append(more.launch(sizes, smem_limit, sm_count))
        return out

    def workspace_bytes(self, sizes: dict[str, int]) -> int:
        try:
            return expr.evaluate_int(self.workspace, self.env(sizes))
        except expr.ExprError as e:
            raise ConfigError(f"{self.study}/{self.id}: workspace at {sizes}: {e}") from None

    kind: str = "cuda"  # cuda (a .cu), triton (a @triton.jit function) or torch (a callable)
    arch: str | None = None  # this variant's nvcc target (None: the global arch)
    cluster: tuple[Any, ...] = ()  # cluster dimensions (expressions); () is no cluster
    tma: dict[str, dict[str, Any]] = field(default_factory=dict)  # matrix -> {box, swizzle}

    def target(self, arch: str) -> str:
        """The nvcc target this variant is built for, given the global one."""
        return self.arch or arch

    @property
    def is_tuned(self) -> bool:
        return bool(self.candidates)

    def env(self, sizes: dict[str, int]) -> dict[str, Any]:
        return {**self.defines, **sizes}

    def unmet(self, sizes: dict[str, int]) -> list[str]:
        """The ``requires`` conditions these sizes fail."""
        env = self.env(sizes)
        try:
            return [r for r in self.requires if not expr.evaluate(r, env)]
        except expr.ExprError as e:
            raise ConfigError(f"{self.study}/{self.id}: requires at {sizes}: {e}") from None

    def launch(
        self, sizes: dict[str, int], smem_limit: int | None = None, sm_count: int | None = None
    ) -> Launch:
        """The launch at these sizes; a geometry CUDA would refuse raises ConfigError.

        ``sm_count``: the device's SM count, the grid's ``SM_COUNT`` (a persistent kernel's
        one block per SM); without a device (config checks, CPU tests) the nominal
        NOMINAL_SM_COUNT. The measured rows record the grid the device got."""
        env = self.env(sizes)
        grid_env = {**env, SM_COUNT: int(sm_count or NOMINAL_SM_COUNT)}
        try:
            grid = [expr.evaluate_int(g, grid_env) for g in self.grid]
            block = [expr.evaluate_int(b, env) for b in self.block]
            smem = expr.evaluate_int(self.smem, env)
            cluster = [expr.evaluate_int(c, env) for c in self.cluster] or [1]
            tma = [
                (
                    name,
                    expr.evaluate_int(m["box"][0], env),
                    expr.evaluate_int(m["box"][1], env),
                    int(m.get("swizzle", 128)),
                )
                for name, m in self.tma.items()
            ]
        except expr.ExprError as e:
            raise ConfigError(
                f"{self.study}/{self.id}: launch geometry at {_size_text(sizes)}: {e}"
            ) from None
        grid += [1] * (3 - len(grid))
        block += [1] * (3 - len(block))
        cluster += [1] * (3 - len(cluster))
        problems = launch_problems(grid, block, smem, smem_limit)
        problems += cluster_problems(grid, cluster)
        for t in tma:
            problems += tma_problems(*t)
        if problems:
            raise ConfigError(
                f"{self.study}/{self.id}: {'; '.join(problems)} at {_size_text(sizes)}"
            )
        return Launch(tuple(grid), tuple(block), smem, tuple(cluster), tuple(tma))

    def spec(self) -> dict[str, Any]:
        """What defines this variant's build and launch: a change reruns its jobs."""
        return {
            "source": self.source,
            "entry": self.entry,
            "defines": self.defines,
            "nvcc_flags": list(self.nvcc_flags),
            "grid": list(self.grid),
            "block": list(self.block),
            "smem": self.smem,
            "requires": list(self.requires),
            **({"computes": self.computes} if self.computes else {}),
            **({"then": [dict(t) for t in self.then]} if self.then else {}),
            **({"workspace": self.workspace} if self.workspace else {}),
            **({"kind": self.kind} if self.kind != "cuda" else {}),
            **({"arch": self.arch} if self.arch else {}),
            **({"cluster": list(self.cluster)} if self.cluster else {}),
            **({"tma": self.tma} if self.tma else {}),
        }

    def spec_sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.spec(), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Study:
    name: str
    path: str
    problem: str
    dtype: str
    params: dict[str, Any]
    sizes: tuple[dict[str, int], ...]
    baseline: str
    headline: dict[str, int] | None
    tolerance: float | None
    timing: dict[str, Any]
    variants: tuple[Variant, ...]  # as declared, tuned ones included
    candidates: tuple[Variant, ...]  # the tuned variants' candidates
    title: str = ""
    question: str = ""
    references: tuple[dict, ...] = ()
    profile: dict[str, Any] = field(default_factory=dict)  # global settings + study's
    profile_sizes: tuple[dict[str, int], ...] = ()
    sanitize_tools: tuple[str, ...] = ()
    # where compute-sanitizer runs: each variant at the first of these its `requires` accept,
    # else (none given, or none it can run) at its smallest runnable size of the study
    sanitize_sizes: tuple[dict[str, int], ...] = ()
    # and also at each of these a variant's `requires` accept (paths the first does not reach)
    sanitize_also: tuple[dict[str, int], ...] = ()
    # baselines timed beside the first (``baseline: [a, b, ...]``): extra columns, lines
    extra_baselines: tuple[str, ...] = ()
    second_headline: dict[str, int] | None = None  # a second size the ladder is drawn at
    # what the study sets out to reach: {metric, min, size, variant (or None), says}
    targets: tuple[dict[str, Any], ...] = ()
    figure_of_merit: str = "tflops"  # the study's, else its problem's: tflops or gbps
    # a gbps study's same-bytes reference, timed beside each variant: copy or read
    bandwidth_reference: str = "copy"

    def sanitize_size_for(self, variant: Variant) -> dict[str, int] | None:
        """The first configured size the variant can run, else its smallest runnable size
        of the study (None: none runs)."""
        for s in self.sanitize_sizes:
            if not variant.unmet(s):
                return s
        prob = problems.get(self.problem)
        runnable = [s for s in self.sizes if not variant.unmet(s)]
        return min(runnable, key=lambda s: _cost(prob, s, self.dtype)) if runnable else None

    def sanitize_sizes_for(self, variant: Variant) -> list[dict[str, int]]:
        """Every size the variant is sanitized at: sanitize_size_for's, then each of
        ``sanitize.also`` it can run (in order, none twice); [] where it runs none."""
        first = self.sanitize_size_for(variant)
        out = [] if first is None else [first]
        for s in self.sanitize_also:
            if not variant.unmet(s) and s not in out:
                out.append(s)
        return out

    @property
    def profiled_baselines(self) -> tuple[str, ...]:
        """The baselines a study profile runs beside the variants: the primary, then each
        other one a target is held against (``pct_of_<name>``), in the targets' order."""
        metrics = [str(t.get("metric", "")) for t in self.targets]
        named = [m[len("pct_of_") :] for m in metrics if m.startswith("pct_of_")]
        return (self.baseline, *(n for n in dict.fromkeys(named) if n in self.extra_baselines))

    def expects(self) -> dict[str, str | None]:
        """{variant id: its ``expect`` (None for an ordinary variant)}: what the gates read."""
        return {v.id: v.expect for v in self.variants}

    def variant(self, vid: str) -> Variant:
        for v in (*self.variants, *self.candidates):
            if v.id == vid:
                return v
        known = ", ".join(v.id for v in self.variants)
        raise ConfigError(f"{self.path}: no variant '{vid}' (variants: {known})")

    def jobs(self) -> list[Variant]:
        """Everything that is compiled and benched on its own: plain variants and candidates."""
        out = [v for v in self.variants if not v.is_tuned]
        return out + list(self.candidates)

    @property
    def size_names(self) -> tuple[str, ...]:
        return problems.get(self.problem).size_names


@dataclass(frozen=True)
class Project:
    root: Path
    settings: dict[str, Any]
    studies: dict[str, Study]

    def study(self, name: str) -> Study:
        if name not in self.studies:
            raise ConfigError(f"no study '{name}' in this run (studies: {', '.join(self.studies)})")
        return self.studies[name]


def _cost(problem, sizes: dict[str, int], dtype: str) -> tuple[float, float]:
    """Order sizes by FLOPs, then minimal bytes (bandwidth problems may count no FLOPs)."""
    return (problem.flops(sizes), problem.min_bytes(sizes, dtype))
