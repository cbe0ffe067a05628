"""Load the global config and the study files into a resolved Project.

Everything it returns is resolved: defaults filled, sizes expanded, expressions parsed and
their names checked, autotuning spaces expanded into candidate variants. Every error names
the file and the key at fault.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from typing import Any

import jsonschema

from kernelbook import problems
from kernelbook.config import expr
from kernelbook.config.limits import SM_COUNT, arch_number, smem_optin_limit
from kernelbook.config.model import Project, Study, Variant, _cost
from kernelbook.config.schema import CANDIDATE_SEP, ConfigError, _where, read_yaml, schema, validate
from kernelbook.config.sizes import _complete_size, expand_sizes

# --------------------------------------------------------------------------------------
# Loading


def check_timing(t: dict, where: str) -> None:
    """The timing settings' combinations the schema cannot say; ``where`` names the file
    (the config, or the study whose block this is)."""
    if t["method"] == "graph" and t["cache"] == "cold":
        raise ConfigError(f"{where}: timing.method 'graph' needs timing.cache 'warm'")
    if t["method"] == "host" and t["cache"] == "cold":
        raise ConfigError(
            f"{where}: timing.method 'host' needs timing.cache 'warm': host time is measured "
            "over back-to-back calls with no L2 flush between them, so a cold cache cannot "
            "be honoured (set cache: warm in the same timing block)"
        )
    if t["max_samples"] < t["min_samples"]:
        raise ConfigError(f"{where}: timing.max_samples is below timing.min_samples")


def load_settings(data: Any, source: str = "config") -> dict[str, Any]:
    settings = validate(data, "config", source)
    check_timing(settings["timing"], source)
    return settings


def load_project(data: Any, root: Path | str = ".", source: str = "config") -> Project:
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
    data = read_yaml(path, shown)
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
    check_timing(timing, shown)

    prob_raw = dict(raw.get("profile", {}))
    profile_sizes = tuple(
        _complete_size(z, problem.size_names, f"{shown}: profile.sizes[{i}]", problem.zero_sizes)
        for i, z in enumerate(prob_raw.pop("sizes", []))
    ) or ((headline,) if headline else (max(sizes, key=lambda s: _cost(problem, s, raw["dtype"])),))
    profile = {**settings["profile"], **prob_raw}
    san_raw = raw.get("sanitize", {})
    # one size, or several: each variant is sanitized at the first its `requires` accept
    given = san_raw.get("size", [])
    given = [given] if isinstance(given, dict) else given
    sanitize_sizes = tuple(
        _complete_size(
            z,
            problem.size_names,
            f"{shown}: sanitize.size" + (f"[{i}]" if len(given) > 1 else ""),
            problem.zero_sizes,
        )
        for i, z in enumerate(given)
    )
    sanitize_also = tuple(
        _complete_size(z, problem.size_names, f"{shown}: sanitize.also[{i}]", problem.zero_sizes)
        for i, z in enumerate(san_raw.get("also", []))
    )
    sanitize_tools = tuple(san_raw.get("tools", settings["sanitize"]["tools"]))

    posed = [("sizes", s) for s in sizes] + [("profile.sizes", s) for s in profile_sizes]
    posed += [("sanitize.size", s) for s in sanitize_sizes]
    posed += [("sanitize.also", s) for s in sanitize_also]
    for key, s in posed:
        why = problem.size_error(s)
        if why:
            raise ConfigError(f"{shown}: {key}: {problem.label(s)}: {why}")

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
        claimed = [*sizes, *profile_sizes, *sanitize_sizes, *sanitize_also]
        _check_launches([v, *cands], claimed, smem_optin_limit(v.target(settings["arch"])), where)
    _check_claims(variants, shown)
    fom = raw.get("figure_of_merit", problem.figure_of_merit)
    if "bandwidth_reference" in raw and fom != "gbps":
        raise ConfigError(
            f"{shown}: bandwidth_reference: {raw['bandwidth_reference']} is for a study whose "
            f"figure of merit is gbps, and this one's is {fom} (set figure_of_merit: gbps)"
        )
    targets = _targets(raw, shown, problem, sizes, headline, baselines)
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
        targets=targets,
        figure_of_merit=fom,
        bandwidth_reference=raw.get("bandwidth_reference", "copy"),
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
        sanitize_sizes=sanitize_sizes,
        sanitize_also=sanitize_also,
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


CLAIM_REFERENCES = ("previous", "baseline")  # besides the ids of the study's other variants


def claims_of(raw) -> dict[str, str]:
    """A variant's ``claims:`` as {against: verdict}: a bare verdict is against 'previous'."""
    if not raw:
        return {}
    return {"previous": raw} if isinstance(raw, str) else dict(raw)


def _check_claims(variants: list[Variant], shown: str) -> None:
    """Each claim is against the step before it, the baseline or another variant of the
    study, and is made by a variant that is timed (not a negative control)."""
    ids = [v.id for v in variants]
    for i, v in enumerate(variants):
        if not v.claims:
            continue
        where = f"{shown}: variants[{i}] ({v.id}).claims"
        if v.expect:
            raise ConfigError(
                f"{where}: a negative control (expect: {v.expect}) is not timed, so it can "
                "claim no speed"
            )
        for ref in v.claims:
            if ref == "previous" and i == 0:
                raise ConfigError(
                    f"{where}: the first variant has no step before it; name what it is "
                    "against (baseline or a variant id)"
                )
            if ref == v.id:
                raise ConfigError(f"{where}: {ref} is this variant itself")
            if ref not in CLAIM_REFERENCES and ref not in ids:
                known = ", ".join([*CLAIM_REFERENCES, *(x for x in ids if x != v.id)])
                raise ConfigError(
                    f"{where}: '{ref}' is not previous, baseline or a variant of this study "
                    f"(known: {known})"
                )


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
        claims=claims_of(vraw.get("claims")),
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


def _targets(raw, shown, problem, sizes, headline, baselines) -> tuple[dict, ...]:
    """The study's ``targets``, each with its size completed (default: the headline) and its
    metric and variant checked against the study."""
    out = []
    variant_ids = {v["id"] for v in raw["variants"]}
    metrics = {"tflops", "gbps", "pct_of_baseline"}
    metrics |= {f"pct_of_{b}" for b in baselines[1:]}
    if raw.get("figure_of_merit", problem.figure_of_merit) == "gbps":
        metrics.add("pct_of_copy")  # the same-bytes copy (or read) is timed in gbps studies
    for i, t in enumerate(raw.get("targets", [])):
        where = f"{shown}: targets[{i}]"
        if t["metric"] not in metrics:
            raise ConfigError(
                f"{where}: metric {t['metric']!r} is not one this study measures "
                f"(one of {', '.join(sorted(metrics))})"
            )
        if ("min" in t) == ("max_drop" in t):
            raise ConfigError(
                f"{where}: needs either 'min' (the least value, at one size) or 'max_drop' "
                "(the most a step may lose at other sizes), not "
                + ("both" if "min" in t else "neither")
            )
        if "max_drop" in t:
            out.append(_drop_target(t, where, problem, sizes, headline, variant_ids))
            continue
        for key in ("sizes", "against", "why"):
            if key in t:
                raise ConfigError(f"{where}: {key!r} goes with 'max_drop', not with 'min'")
        if "size" in t:
            size = _complete_size(
                t["size"], problem.size_names, f"{where}: size", problem.zero_sizes
            )
            if size not in sizes:
                raise ConfigError(f"{where}: size {size} is not one of the study's sizes")
        elif headline is not None:
            size = headline
        else:
            raise ConfigError(f"{where}: no size, and the study has no headline to default to")
        if "variant" in t and t["variant"] not in variant_ids:
            raise ConfigError(
                f"{where}: variant {t['variant']!r} is not one of the study's variants"
            )
        out.append(
            {
                "metric": t["metric"],
                "min": float(t["min"]),
                "size": size,
                "variant": t.get("variant"),
                "says": t.get("says", ""),
            }
        )
    return tuple(out)


def _drop_target(t, where, problem, sizes, headline, variant_ids) -> dict:
    """A ``max_drop`` target: every step held at ``sizes`` against its value at ``against``
    (default: the headline), with the causes the config gives by variant (``why``)."""
    for key in ("size", "variant"):
        if key in t:
            raise ConfigError(f"{where}: {key!r} goes with 'min'; with 'max_drop' give 'sizes'")
    if "sizes" not in t:
        raise ConfigError(f"{where}: 'max_drop' needs 'sizes', the sizes each step is held at")

    def one(raw, what):
        size = _complete_size(raw, problem.size_names, f"{where}: {what}", problem.zero_sizes)
        if size not in sizes:
            raise ConfigError(f"{where}: {what} {size} is not one of the study's sizes")
        return size

    if "against" in t:
        against = one(t["against"], "against")
    elif headline is not None:
        against = headline
    else:
        raise ConfigError(f"{where}: no 'against', and the study has no headline to default to")
    held = [one(s, f"sizes[{j}]") for j, s in enumerate(t["sizes"])]
    if against in held:
        raise ConfigError(f"{where}: sizes include {against}, the size they are held against")
    unknown = sorted(set(t.get("why", {})) - variant_ids)
    if unknown:
        raise ConfigError(
            f"{where}: why names {', '.join(map(repr, unknown))}, not a variant of the study"
        )
    return {
        "metric": t["metric"],
        "max_drop": float(t["max_drop"]),
        "sizes": tuple(held),
        "against": against,
        "why": dict(t.get("why", {})),
        "says": t.get("says", ""),
    }
