"""study.json: what a study's page needs from its config (titles, ladder order, says, claims
and predict per variant, references, each kernel's leading comment), written at build time."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kernelbook import problems, tune


def leading_comment(text: str) -> str:
    """The comment block a kernel file opens with (// lines or one /* */ block), unmarked."""
    lines = text.splitlines()
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    out: list[str] = []
    if i < len(lines) and lines[i].lstrip().startswith("/*"):
        for line in lines[i:]:
            s = line.strip()
            end = "*/" in s
            s = s.split("*/")[0].removeprefix("/*").removeprefix("*").rstrip()
            out.append(s[1:] if s.startswith(" ") else s)
            if end:
                break
    else:
        for line in lines[i:]:
            s = line.strip()
            if not s.startswith("//"):
                break
            s = s[2:]
            out.append(s[1:] if s.startswith(" ") else s)
    while out and not out[-1].strip():
        out.pop()
    while out and not out[0].strip():
        out.pop(0)
    return "\n".join(out)


def study_meta(study, root: str | Path) -> dict:
    """What the page needs from a resolved study (kernelbook.config.Study), as plain JSON."""
    from kernelbook.provenance import sha256_source

    root = Path(root)
    problem = problems.get(study.problem)
    variants = []
    for v in study.variants:
        path = root / v.source
        text = path.read_text(errors="replace") if path.is_file() else ""
        cands = [c for c in study.candidates if c.tuned_from == v.id]
        variants.append(
            {
                "id": v.id,
                "source": v.source,
                "entry": v.entry,
                "says": v.says,
                "claims": dict(v.claims),
                "predict": dict(v.predict),
                "expect": v.expect,
                **({"computes": v.computes} if v.computes else {}),  # reference kernel, or superset
                "header": leading_comment(text),
                "defines": v.defines if not v.is_tuned else {},
                "requires": list(v.requires),
                "tuned": v.is_tuned,
                "candidates": list(v.candidates),
                "tune_space": _tune_space(cands),
                "tune_sizes": [problem.label(s) for s in v.tune_sizes],
                "sweep_pick": (
                    problem.label(tune.sweep_pick(study, v))
                    if v.is_tuned and tune.sweep_sizes(study, v)
                    else None
                ),
                "source_sha256": sha256_source(path) if path.is_file() else None,
                "spec_sha256": None if v.is_tuned else v.spec_sha256(),
            }
        )
    return {
        "study": study.name,
        "path": study.path,
        "title": study.title or study.name,
        "question": study.question,
        "problem": study.problem,
        "dtype": study.dtype,
        "params": study.params,
        "baseline": study.baseline,
        "figure_of_merit": study.figure_of_merit,
        "bandwidth_reference": study.bandwidth_reference,
        "size_names": list(problem.size_names),
        "sizes": [problem.label(s) for s in study.sizes],
        "headline": problem.label(study.headline) if study.headline else None,
        "second_headline": (
            problem.label(study.second_headline) if study.second_headline else None
        ),
        "references": [dict(r) for r in study.references],
        "targets": [_target_labels(t, problem) for t in study.targets],
        "variants": variants,
    }


def _target_labels(t: dict, problem) -> dict:
    """A target as study.json keeps it: its sizes as their labels."""
    if "max_drop" in t:
        return {
            **t,
            "sizes": [problem.label(s) for s in t["sizes"]],
            "against": problem.label(t["against"]),
        }
    return {**t, "size": problem.label(t["size"])}


def _tune_space(cands) -> dict[str, list[int]]:
    space: dict[str, list[int]] = {}
    for c in cands:
        for k, val in c.tune_point.items():
            space.setdefault(k, [])
            if val not in space[k]:
                space[k].append(val)
    return space


def spec_hash(study) -> str:
    """Hash of what study.json is made of from the config: a change to any of it rewrites it."""
    import hashlib

    text = json.dumps(
        {
            "title": study.title,
            "question": study.question,
            "headline": study.headline,
            "second_headline": study.second_headline,
            "sizes": study.sizes,
            "references": study.references,
            "targets": study.targets,
            "variants": [
                {**v.spec(), "id": v.id, "says": v.says, "claims": v.claims, "predict": v.predict}
                for v in (*study.variants, *study.candidates)
            ],
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def write_meta(study, root, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(study_meta(study, root), indent=1, sort_keys=False) + "\n")
    return path


def meta_from_data(meas: pd.DataFrame) -> dict:
    """A minimal study.json for tables published without one: the order the data has."""
    main = meas[meas["variant_kind"] != "candidate"]
    study = str(meas["study"].iloc[0]) if len(meas) else "study"
    return {
        "study": study,
        "title": study,
        "question": "",
        "problem": str(meas["problem"].iloc[0]) if len(meas) else "",
        "baseline": str(meas["baseline"].iloc[0]) if len(meas) else "baseline",
        "figure_of_merit": "tflops",
        "headline": None,
        "references": [],
        "variants": [
            {"id": v, "says": "", "predict": {}, "header": "", "tuned": False}
            for v in dict.fromkeys(main["variant"])
        ],
    }


def write_study_meta(project, name: str, out: str | Path) -> int:
    """`kernelbook meta STUDY --out FILE` (rule study_meta): write the study's study.json."""
    import sys

    write_meta(project.study(name), project.root, out)
    print(f"{name}: wrote {out}", file=sys.stderr)
    return 0
