"""Load, validate and resolve the global config and the study files.

This is the only module that reads YAML. Everything it returns is resolved: defaults
filled, sizes expanded, expressions parsed and their names checked, autotuning spaces
expanded into candidate variants. Every error names the file and the key at fault.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from kernelbook import expr, problems

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = REPO_ROOT / "workflow" / "schemas"
CANDIDATE_SEP = "__"


class ConfigError(ValueError):
    """A config or study file that cannot be used; the message names file and key."""


# libyaml's parser where PyYAML was built with it: the same documents, several times faster
# (the config is loaded by every snakemake invocation and by many of its jobs).
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _schema_text(path: Path) -> str:
    return path.read_text()


def schema(name: str) -> dict:
    path = SCHEMA_DIR / f"{name}.schema.yaml"
    if not path.is_file():
        raise ConfigError(f"schema {path} is missing: is kernelbook run from its repository?")
    return yaml.load(_schema_text(path), Loader=_Loader)


def read_yaml(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(f"{path}: file not found")
    try:
        return yaml.load(path.read_text(), Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None


def _where(path_items, data: Any = None) -> str:
    """``variants[1] (02_coalescing).bogus``: a path into the file, a variant named by its id."""
    items = list(path_items)
    out = ""
    for i, item in enumerate(items):
        out += f"[{item}]" if isinstance(item, int) else (f".{item}" if out else str(item))
        if i == 1 and items[0] == "variants" and items[2:] != ["id"]:
            try:
                vid = data["variants"][item]["id"]
            except (KeyError, IndexError, TypeError):
                vid = None
            if isinstance(vid, str):
                out += f" ({vid})"
    return out or "(top level)"


def validate(data: Any, schema_name: str, source: str) -> dict:
    """Validate against a schema in workflow/schemas and fill its defaults; return a copy."""
    sch = schema(schema_name)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping at the top level, got {type(data).__name__}"
        )
    validator = jsonschema.Draft202012Validator(sch)
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), e.path))
    if errors:
        err = jsonschema.exceptions.best_match(errors)
        raise ConfigError(f"{source}: {_where(err.absolute_path, data)}: {_message(err)}")
    data = copy.deepcopy(data)
    _fill_defaults(sch, data)
    return data


def _message(err: jsonschema.ValidationError) -> str:
    if err.validator == "required":
        return err.message.replace("is a required property", "is required")
    if err.validator == "additionalProperties":
        return err.message.replace("Additional properties are not allowed", "unknown key")
    if err.validator in ("oneOf", "anyOf"):
        hint = err.schema.get("description", "")
        return f"{err.instance!r} is not a valid value here" + (f" ({hint})" if hint else "")
    return err.message


def _fill_defaults(sch: dict, data: dict) -> None:
    for key, sub in sch.get("properties", {}).items():
        if key not in data and "default" in sub:
            data[key] = copy.deepcopy(sub["default"])
        if isinstance(data.get(key), dict) and "properties" in sub:
            _fill_defaults(sub, data[key])


# --------------------------------------------------------------------------------------
# Records


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


# CUDA's launch limits (CUDA C++ Programming Guide, "Features and Technical Specifications"),
# the same on every architecture since sm_30.
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
# The dynamic shared memory one block may opt into (cudaFuncAttributeMaxDynamicSharedMemorySize
# up to cudaDevAttrMaxSharedMemoryPerBlockOptin), by compute capability, from the same table.
# An arch not listed here is not checked at config load; the launch on the GPU still is.
SMEM_OPTIN_BYTES = {
    70: 96 * 1024,  # V100
    75: 64 * 1024,  # T4
    80: 163 * 1024,  # A100
    86: 99 * 1024,
    87: 163 * 1024,
    89: 99 * 1024,  # L4, L40
    90: 227 * 1024,  # H100, H200 (sm_90 and sm_90a)
    100: 227 * 1024,  # B200
    120: 99 * 1024,
}


def arch_number(arch: str) -> int | None:
    """The compute capability of an nvcc target as a number (sm_90a -> 90)."""
    digits = "".join(ch for ch in arch.partition("_")[2] if ch.isdigit())
    return int(digits) if digits else None


def smem_optin_limit(arch: str) -> int | None:
    """The dynamic shared memory limit of an nvcc target (sm_90a -> 90), None if not tabled."""
    num = arch_number(arch)
    return SMEM_OPTIN_BYTES.get(num) if num else None


# Thread block clusters: sm_90 and later; 8 blocks is the portable maximum.
MAX_CLUSTER_BLOCKS = 8
# TMA (cuTensorMapEncodeTiled): each box dimension 1..256 elements, the inner one a multiple
# of 16 bytes and, with a swizzle, no wider than the swizzle span.
MAX_TMA_BOX = 256


def cluster_problems(grid: list[int], cluster: list[int]) -> list[str]:
    out = []
    if any(c < 1 for c in cluster):
        out.append(f"cluster {cluster} has a zero")
        return out
    n = cluster[0] * cluster[1] * cluster[2]
    if n > MAX_CLUSTER_BLOCKS:
        out.append(f"cluster {cluster} has {n} blocks (> {MAX_CLUSTER_BLOCKS}, the portable size)")
    if any(g % c for g, c in zip(grid, cluster, strict=True)):
        out.append(f"grid {grid} is not a multiple of cluster {cluster}")
    return out


def tma_problems(name: str, rows: int, cols: int, swizzle: int, itemsize: int = 2) -> list[str]:
    out = []
    for what, d in (("rows", rows), ("columns", cols)):
        if not 1 <= d <= MAX_TMA_BOX:
            out.append(f"tma.{name}.box {what} {d} outside 1..{MAX_TMA_BOX}")
    inner = cols * itemsize
    if inner % 16:
        out.append(f"tma.{name}.box: {cols} columns are {inner} bytes, not a multiple of 16")
    if swizzle and inner > swizzle:
        out.append(
            f"tma.{name}.box: {cols} columns are {inner} bytes, wider than the {swizzle}-byte "
            f"swizzle"
        )
    return out


def launch_problems(
    grid: list[int], block: list[int], smem: int, smem_limit: int | None = None
) -> list[str]:
    """What makes this geometry impossible to launch, as short phrases (empty: it launches)."""
    out = []
    threads = block[0] * block[1] * block[2]
    for name, dims, top in (("grid", grid, MAX_GRID), ("block", block, MAX_BLOCK)):
        if any(d < 1 for d in dims):
            out.append(f"{name} {dims} has a zero")
        elif name == "block" and threads > MAX_THREADS_PER_BLOCK:
            out.append(f"block {block} has {threads} threads (> {MAX_THREADS_PER_BLOCK})")
        elif any(d > m for d, m in zip(dims, top, strict=True)):
            out.append(f"{name} {dims} exceeds CUDA's limit {list(top)}")
    if smem < 0:
        out.append(f"negative dynamic shared memory {smem}")
    elif smem_limit is not None and smem > smem_limit:
        out.append(
            f"dynamic shared memory {smem} bytes exceeds the {smem_limit} bytes a block may use"
        )
    return out


def _size_text(sizes: dict[str, int]) -> str:
    return "size " + ", ".join(f"{k}={v}" for k, v in sizes.items())


# The device's SM count, a name only grid expressions may use; NOMINAL_SM_COUNT (the
# H100/H200 SXM's) stands in where no device is at hand (config checks, CPU tests).
SM_COUNT = "SM_COUNT"
NOMINAL_SM_COUNT = 132


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
    sanitize_size: dict[str, int] | None = None
    # baselines timed beside the first (``baseline: [a, b, ...]``): extra columns, lines
    extra_baselines: tuple[str, ...] = ()
    second_headline: dict[str, int] | None = None  # a second size the ladder is drawn at

    def sanitize_size_for(self, variant: Variant) -> dict[str, int] | None:
        """The configured size, else the variant's smallest runnable size (None: none runs)."""
        if self.sanitize_size is not None:
            return self.sanitize_size
        prob = problems.get(self.problem)
        runnable = [s for s in self.sizes if not variant.unmet(s)]
        return min(runnable, key=lambda s: _cost(prob, s, self.dtype)) if runnable else None

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


# --------------------------------------------------------------------------------------
# Loading


def load_settings(data: Any, source: str = "config") -> dict[str, Any]:
    settings = validate(data, "config", source)
    t = settings["timing"]
    if t["method"] == "graph" and t["cache"] == "cold":
        raise ConfigError(f"{source}: timing.method 'graph' needs timing.cache 'warm'")
    if t["max_samples"] < t["min_samples"]:
        raise ConfigError(f"{source}: timing.max_samples is below timing.min_samples")
    return settings


def load_project(data: Any, root: Path | str = REPO_ROOT, source: str = "config") -> Project:
    root = Path(root)
    settings = load_settings(data, source)
    study_dir = root / settings["study_dir"]
    studies = {}
    for name in settings["studies"]:
        studies[name] = load_study(study_dir / f"{name}.yaml", settings, root)
    return Project(root, settings, studies)


def load_project_file(configfile: Path | str = "config/config.yaml", root=None, overrides=None):
    configfile = Path(configfile)
    root = Path(root) if root else configfile.resolve().parent.parent
    data = read_yaml(configfile)
    if overrides:
        if not isinstance(data, dict):
            raise ConfigError(f"{configfile}: expected a mapping at the top level")
        data = {**data, **overrides}
    return load_project(data, root, str(configfile))


def load_study(path: Path, settings: dict, root: Path) -> Study:
    name = path.stem
    try:
        shown = str(path.relative_to(root))
    except ValueError:
        shown = str(path)
    data = read_yaml(path)
    _check_flow_commas(data, shown)
    raw = validate(data, "study", shown)
    try:
        problem = problems.get(raw["problem"])
    except KeyError as e:
        raise ConfigError(f"{shown}: problem: {e.args[0]}") from None
    if raw["dtype"] not in problem.dtypes:
        raise ConfigError(
            f"{shown}: dtype: problem '{problem.name}' supports {', '.join(problem.dtypes)}, "
            f"not {raw['dtype']}"
        )
    baselines = raw["baseline"] if isinstance(raw["baseline"], list) else [raw["baseline"]]
    for bname in baselines:
        if bname not in problem.baselines:
            raise ConfigError(
                f"{shown}: baseline: problem '{problem.name}' offers "
                f"{', '.join(problem.baselines)}, not '{bname}'"
            )
    unknown = set(raw.get("params", {})) - set(problem.default_params)
    if unknown:
        raise ConfigError(
            f"{shown}: params: unknown parameter(s) {', '.join(sorted(unknown))} for problem "
            f"'{problem.name}' (known: {', '.join(problem.default_params) or 'none'})"
        )
    params = {**problem.default_params, **raw.get("params", {})}
    sizes = expand_sizes(raw["sizes"], problem.size_names, f"{shown}: sizes", problem.zero_sizes)
    headline = None
    if "headline" in raw:
        headline = _complete_size(
            raw["headline"], problem.size_names, f"{shown}: headline", problem.zero_sizes
        )
        if headline not in sizes:
            raise ConfigError(f"{shown}: headline {headline} is not one of the study's sizes")
    second = None
    if "second_headline" in raw:
        second = _complete_size(
            raw["second_headline"],
            problem.size_names,
            f"{shown}: second_headline",
            problem.zero_sizes,
        )
        if second not in sizes:
            raise ConfigError(f"{shown}: second_headline {second} is not one of the study's sizes")
    timing = {**settings["timing"], **raw.get("timing", {})}
    sub = schema("config")["properties"]["timing"]
    try:
        jsonschema.validate(timing, sub)
    except jsonschema.ValidationError as e:
        raise ConfigError(f"{shown}: timing.{_where(e.absolute_path)}: {e.message}") from None
    if timing["method"] == "graph" and timing["cache"] == "cold":
        raise ConfigError(f"{shown}: timing.method 'graph' needs timing.cache 'warm'")
    if timing["max_samples"] < timing["min_samples"]:
        raise ConfigError(f"{shown}: timing.max_samples is below timing.min_samples")

    prob_raw = dict(raw.get("profile", {}))
    profile_sizes = tuple(
        _complete_size(z, problem.size_names, f"{shown}: profile.sizes[{i}]", problem.zero_sizes)
        for i, z in enumerate(prob_raw.pop("sizes", []))
    ) or ((headline,) if headline else (max(sizes, key=lambda s: _cost(problem, s, raw["dtype"])),))
    profile = {**settings["profile"], **prob_raw}
    san_raw = raw.get("sanitize", {})
    sanitize_size = None
    if "size" in san_raw:
        sanitize_size = _complete_size(
            san_raw["size"], problem.size_names, f"{shown}: sanitize.size", problem.zero_sizes
        )
    sanitize_tools = tuple(san_raw.get("tools", settings["sanitize"]["tools"]))

    variants, candidates, seen = [], [], set()
    for i, vraw in enumerate(raw["variants"]):
        where = f"{shown}: variants[{i}] ({vraw['id']})"
        if vraw["id"] in seen:
            raise ConfigError(f"{where}: duplicate id")
        if CANDIDATE_SEP in vraw["id"]:
            raise ConfigError(f"{where}: id may not contain '{CANDIDATE_SEP}'")
        seen.add(vraw["id"])
        v, cands = _variant(name, vraw, settings, root, problem, params, sizes, where)
        variants.append(v)
        candidates.extend(cands)
        claimed = [*sizes, *profile_sizes, *([sanitize_size] if sanitize_size else [])]
        _check_launches([v, *cands], claimed, smem_optin_limit(v.target(settings["arch"])), where)
    return Study(
        name=name,
        path=shown,
        problem=problem.name,
        dtype=raw["dtype"],
        params=params,
        sizes=tuple(sizes),
        baseline=baselines[0],
        extra_baselines=tuple(baselines[1:]),
        headline=headline,
        second_headline=second,
        tolerance=raw.get("tolerance"),
        timing=timing,
        variants=tuple(variants),
        candidates=tuple(candidates),
        title=raw.get("title", name),
        question=raw.get("question", ""),
        references=tuple(raw.get("references", [])),
        profile=profile,
        profile_sizes=profile_sizes,
        sanitize_tools=sanitize_tools,
        sanitize_size=sanitize_size,
    )


def _check_launches(variants, sizes, smem_limit: int | None, where: str) -> None:
    """Every variant (a tuned one's candidates too) must launch at every size it claims (the
    sizes its ``requires`` accept), so a geometry CUDA refuses fails here, before any job runs.
    """
    seen = set()
    for v in variants:
        for s in sizes:
            key = (v.id, tuple(s.values()))
            if key in seen or v.unmet(s):
                continue
            seen.add(key)
            try:
                v.launches(s, smem_limit)
                if v.workspace:
                    v.workspace_bytes(s)
            except ConfigError as e:
                who = f" candidate {v.id}" if v.tuned_from else ""
                raise ConfigError(f"{where}:{who} {str(e).partition(': ')[2]}") from None


def _cost(problem, sizes: dict[str, int], dtype: str) -> tuple[float, float]:
    """Order sizes by FLOPs, then minimal bytes (bandwidth problems may count no FLOPs)."""
    return (problem.flops(sizes), problem.min_bytes(sizes, dtype))


def _check_flow_commas(data, shown: str) -> None:
    """`grid: [cdiv(N, BN), ...]` is cut by YAML at the commas; say so instead of 'too long'."""
    if not isinstance(data, dict) or not isinstance(data.get("variants"), list):
        return
    for i, v in enumerate(data["variants"]):
        if not isinstance(v, dict):
            continue
        for key in ("grid", "block", "requires", "cluster"):
            items = v.get(key)
            if isinstance(items, list) and any(
                isinstance(t, str) and t.count("(") != t.count(")") for t in items
            ):
                raise ConfigError(
                    f"{shown}: variants[{i}] ({v.get('id')}).{key}: {items} looks like expressions "
                    'cut at their commas; quote each one: ["cdiv(N, BN)", "cdiv(M, BM)"]'
                )


def expand_sizes(
    groups: list[dict], names: tuple[str, ...], where: str, zero_ok=()
) -> list[dict[str, int]]:
    """Expand size groups (lists sweep, several lists multiply, strings derive) in order."""
    out: list[dict[str, int]] = []
    for gi, group in enumerate(groups):
        gwhere = f"{where}[{gi}]"
        fixed = {k: v for k, v in group.items() if not isinstance(v, str)}
        derived = {k: v for k, v in group.items() if isinstance(v, str)}
        keys = list(fixed)
        lists = [v if isinstance(v, list) else [v] for v in fixed.values()]
        for combo in itertools.product(*lists):
            out.append(
                _complete_size(
                    {**dict(zip(keys, combo, strict=True)), **derived}, names, gwhere, zero_ok
                )
            )
    unique: list[dict[str, int]] = []
    for s in out:
        if s not in unique:
            unique.append(s)
    return unique


def _complete_size(group: dict, names: tuple[str, ...], where: str, zero_ok=()) -> dict[str, int]:
    """A size group completed (derived names evaluated); every value positive, except the
    names in ``zero_ok`` (a problem's flags, such as attention's causal), which may be 0."""
    if not isinstance(group, dict):
        raise ConfigError(f"{where}: expected a mapping of size names")
    unknown = set(group) - set(names)
    if unknown:
        raise ConfigError(
            f"{where}: unknown size name(s) {', '.join(sorted(unknown))} (this problem has "
            f"{', '.join(names)})"
        )
    values = {k: v for k, v in group.items() if not isinstance(v, str)}
    pending = {k: v for k, v in group.items() if isinstance(v, str)}
    for k, v in values.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if k in zero_ok else 1):
            raise ConfigError(f"{where}: {k}: expected a positive integer, got {v!r}")
    while pending:
        progress = False
        for k, text in list(pending.items()):
            try:
                used = expr.names(text)
            except expr.ExprError as e:
                raise ConfigError(f"{where}: {k}: '{text}': {e}") from None
            if used <= set(values):
                try:
                    values[k] = expr.evaluate_int(text, values)
                except expr.ExprError as e:
                    raise ConfigError(f"{where}: {k}: '{text}': {e}") from None
                if values[k] < (0 if k in zero_ok else 1):
                    raise ConfigError(f"{where}: {k}: '{text}' gives {values[k]}, not positive")
                del pending[k]
                progress = True
        if not progress:
            k, text = next(iter(pending.items()))
            missing = expr.names(text) - set(values)
            raise ConfigError(f"{where}: {k}: '{text}' uses undefined {', '.join(sorted(missing))}")
    missing = [n for n in names if n not in values]
    if missing:
        raise ConfigError(f"{where}: missing size name(s) {', '.join(missing)}")
    return {n: values[n] for n in names}


def _resolve_defines(raw: dict, point: dict[str, int], where: str) -> dict[str, Any]:
    out = dict(point)
    for k, v in raw.items():
        if k in point:
            raise ConfigError(f"{where}: defines.{k} is also a tuning parameter")
        if isinstance(v, str):
            try:
                out[k] = expr.evaluate(v, out)
            except expr.ExprError as e:
                raise ConfigError(f"{where}: defines.{k}: '{v}': {e}") from None
        else:
            out[k] = v
    return out


def _check_exprs(items, allowed: set[str], where: str, key: str) -> None:
    for i, item in enumerate(items):
        if isinstance(item, bool | int | float):
            continue
        try:
            used = expr.names(item)
        except expr.ExprError as e:
            raise ConfigError(f"{where}: {key}[{i}] '{item}': {e}") from None
        unknown = used - allowed
        if unknown:
            raise ConfigError(
                f"{where}: {key}[{i}] '{item}': unknown name(s) {', '.join(sorted(unknown))} "
                f"(known: {', '.join(sorted(allowed))})"
            )


KINDS = ("cuda", "triton", "torch")
SOURCE_SUFFIX = {"cuda": ".cu", "triton": ".py", "torch": ".py"}
# Triton's launch settings, as defines (their defaults are Triton's own)
TRITON_DEFAULTS = {"NUM_WARPS": 4, "NUM_STAGES": 3}


def _python_functions(path: Path, where: str) -> list[str]:
    """The top-level functions of a Python source, read without importing it (no triton
    or torch import at config load)."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except SyntaxError as e:
        raise ConfigError(
            f"{where}: {path.name} is not valid Python (line {e.lineno}): {e.msg}"
        ) from None
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]


def _variant(study, vraw, settings, root, problem, params, sizes, where):
    kind = vraw.get("kind", "cuda")
    if kind not in KINDS:  # the schema says so first; kept for records built by hand
        raise ConfigError(f"{where}: kind '{kind}' is not one of {', '.join(KINDS)}")
    source = vraw.get("source", f"kernels/{study}/{vraw['id']}{SOURCE_SUFFIX[kind]}")
    if not (root / source).is_file():
        raise ConfigError(f"{where}: source {source} not found")
    if kind != "cuda":
        if not source.endswith(".py"):
            raise ConfigError(f"{where}: a {kind} variant's source is a .py file, not {source}")
        found = _python_functions(root / source, where)
        if vraw["entry"] not in found:
            raise ConfigError(
                f"{where}: entry '{vraw['entry']}' is not a function of {source} "
                f"(functions: {', '.join(found) or 'none'})"
            )
    several = [k for k in ("then", "workspace") if vraw.get(k)]
    if several and (kind != "cuda" or vraw.get("cluster") or vraw.get("tma")):
        what = f"kind {kind}" if kind != "cuda" else "cluster/tma launches"
        raise ConfigError(
            f"{where}: {' and '.join(several)} are for CUDA C variants launched through "
            f"CuPy, not {what}"
        )
    raw_defines = dict(vraw.get("defines", {}))
    if kind == "triton":
        space = (vraw.get("tune") or {}).get("space", {})
        for k, v in TRITON_DEFAULTS.items():
            if k not in raw_defines and k not in space:
                raw_defines[k] = v
        vraw = {**vraw, "block": ["32 * NUM_WARPS"], "smem": 0}
    elif kind == "torch":
        vraw = {**vraw, "grid": [1], "block": [1], "smem": 0}
    clash = set(raw_defines) & set(problem.size_names)
    if clash:
        raise ConfigError(f"{where}: defines {', '.join(sorted(clash))} clash with size names")
    taken = (set(raw_defines) | set((vraw.get("tune") or {}).get("space", {}))) & {SM_COUNT}
    if taken:
        raise ConfigError(
            f"{where}: {SM_COUNT} is the device's SM count (grid expressions only), not a define"
        )
    if vraw.get("computes") and vraw["computes"] not in problem.alternatives:
        offered = ", ".join(problem.alternatives) or "none"
        raise ConfigError(
            f"{where}: computes: problem '{problem.name}' offers no '{vraw['computes']}' "
            f"(offered: {offered})"
        )
    tune = vraw.get("tune")
    space = tune["space"] if tune else {}
    allowed = set(raw_defines) | set(space) | set(problem.size_names)
    # only a grid may depend on the device (a persistent kernel's one block per SM)
    _check_exprs(vraw["grid"], allowed | {SM_COUNT}, where, "grid")
    _check_exprs(vraw["block"], allowed, where, "block")
    _check_exprs([vraw.get("smem", 0)], allowed, where, "smem")
    _check_exprs(vraw.get("requires", []), allowed, where, "requires")
    _check_exprs([vraw.get("workspace", 0)], allowed, where, "workspace")
    for i, t in enumerate(vraw.get("then", [])):
        _check_exprs(t["grid"], allowed | {SM_COUNT}, where, f"then[{i}].grid")
        _check_exprs(t["block"], allowed, where, f"then[{i}].block")
        _check_exprs([t.get("smem", 0)], allowed, where, f"then[{i}].smem")
    _check_exprs(vraw.get("cluster", []), allowed, where, "cluster")
    tma = vraw.get("tma", {})
    if tma:
        known = getattr(problem, "matrices", None)
        names = set(known(dict.fromkeys(problem.size_names, 1))) if known else set()
        for name, m in tma.items():
            if name not in names:
                raise ConfigError(
                    f"{where}: tma.{name}: problem '{problem.name}' has no matrix '{name}' "
                    f"(matrices: {', '.join(sorted(names)) or 'none'})"
                )
            _check_exprs(m["box"], allowed, where, f"tma.{name}.box")
    arch = vraw.get("arch")
    target = arch or settings["arch"]
    if (vraw.get("cluster") or tma) and (arch_number(target) or 0) < 90:
        raise ConfigError(
            f"{where}: {'cluster' if vraw.get('cluster') else 'tma'} needs sm_90 or later; "
            f"the variant builds for {target} (set its arch: sm_90a)"
        )
    common = dict(
        study=study,
        source=source,
        entry=vraw["entry"],
        nvcc_flags=tuple(vraw.get("nvcc_flags", [])),
        grid=tuple(vraw["grid"]),
        block=tuple(vraw["block"]),
        smem=vraw.get("smem", 0),
        requires=tuple(vraw.get("requires", [])),
        says=vraw.get("says", ""),
        predict=dict(vraw.get("predict", {})),
        expect=vraw.get("expect"),
        computes=vraw.get("computes"),
        known_findings=dict(vraw.get("known_findings", {})),
        then=tuple(dict(t) for t in vraw.get("then", [])),
        workspace=vraw.get("workspace", 0),
        kind=kind,
        arch=arch,
        cluster=tuple(vraw.get("cluster", [])),
        tma={k: dict(v) for k, v in tma.items()},
    )
    if not tune:
        defines = _resolve_defines(raw_defines, {}, where)
        return Variant(id=vraw["id"], defines=defines, **common), []

    constraints = tune.get("constraints", [])
    _check_exprs(constraints, set(raw_defines) | set(space), where, "tune.constraints")
    tune_sizes = tuple(
        _complete_size(s, problem.size_names, f"{where}: tune.sizes[{i}]", problem.zero_sizes)
        for i, s in enumerate(tune.get("sizes", []))
    )
    for s in tune_sizes:
        if s not in sizes:
            raise ConfigError(f"{where}: tune.sizes: {s} is not one of the study's sizes")
    cands = []
    keys = list(space)
    for combo in itertools.product(*space.values()):
        point = dict(zip(keys, combo, strict=True))
        defines = _resolve_defines(raw_defines, point, where)
        try:
            ok = all(expr.evaluate(c, defines) for c in constraints)
        except expr.ExprError as e:
            raise ConfigError(f"{where}: tune.constraints at {point}: {e}") from None
        if not ok:
            continue
        cid = vraw["id"] + CANDIDATE_SEP + "_".join(f"{k}{v}" for k, v in point.items())
        cands.append(
            Variant(
                id=cid,
                defines=defines,
                tuned_from=vraw["id"],
                tune_point=point,
                tune_sizes=tune_sizes,
                **common,
            )
        )
    if not cands:
        raise ConfigError(f"{where}: tune: no point of the space satisfies the constraints")
    first = cands[0]
    parent = Variant(
        id=vraw["id"],
        defines=first.defines,
        candidates=tuple(c.id for c in cands),
        tune_sizes=tune_sizes,
        **common,
    )
    return parent, cands
