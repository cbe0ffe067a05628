"""A tune space swept in one process, outside the DAG: the quick loop for a tuned variant.

    python3 tools/quick_tune.py sgemm 10_warptiling --size 4096 --size 4096x4096x1000 \
        [--space '{"TM": [4, 8], "GROUP_M": [0, 8]}'] [--match REGEX] [--out sweep.parquet]

Every candidate of the variant's tune space (the config's, with --space replacing or adding
axes; the config's constraints still apply) is compiled (all cores), checked against the
reference and timed beside the study's baseline with the project's timer, one job per
candidate but all in this process, so a hundred candidates take a minute or two instead of
the pipeline's per-job start-ups. The table printed (and written with --out) ranks them.
It is a scouting tool: what the worklog publishes still comes from the pipeline, where the
winner is re-timed in a job of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kernelbook import config as cfg  # noqa: E402
from kernelbook import gpu, problems  # noqa: E402
from kernelbook.build import nvcc as build  # noqa: E402
from kernelbook.measure import bench  # noqa: E402


def load(study: str, variant: str, space: dict, timing: dict):
    settings_data = cfg.read_yaml(ROOT / "config/config.yaml")
    settings_data = {**settings_data, "studies": []}
    settings_data["timing"] = {**settings_data.get("timing", {}), **timing}
    project = cfg.load_project(settings_data, ROOT, "config/config.yaml")
    raw = cfg.read_yaml(ROOT / settings_data.get("study_dir", "config/studies") / f"{study}.yaml")
    entry = next((v for v in raw["variants"] if v["id"] == variant), None)
    if entry is None or "tune" not in entry:
        raise SystemExit(f"quick_tune: {study}/{variant} is not a tuned variant of {study}.yaml")
    entry["tune"]["space"] = {**entry["tune"]["space"], **space}
    entry["source"] = entry.get("source", f"kernels/{study}/{variant}.cu")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{study}.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        st = cfg.load_study(path, project.settings, ROOT)
    project.studies[study] = st
    return project, st, st.variant(variant)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("study")
    p.add_argument("variant")
    p.add_argument("--size", action="append", required=True)
    p.add_argument("--space", default="{}", help="JSON: tune axes replaced or added")
    p.add_argument("--match", help="only candidates whose id matches this regular expression")
    p.add_argument("--out", help="the ranked rows (Parquet)")
    p.add_argument("--build-dir", help="where cubins go, and are reused from (default: a temp dir)")
    p.add_argument("--compile-only", action="store_true", help="build, then stop (no GPU)")
    p.add_argument("--min-time-s", type=float, default=0.05)
    p.add_argument("--target-rse", type=float, default=0.005)
    args = p.parse_args(argv)

    timing = {"min_time_s": args.min_time_s, "target_rse": args.target_rse, "max_time_s": 5}
    project, study, variant = load(args.study, args.variant, json.loads(args.space), timing)
    problem = problems.get(study.problem)
    sizes = [problem.parse_size(s) for s in args.size]
    cands = [study.variant(c) for c in variant.candidates]
    if args.match:
        cands = [c for c in cands if re.search(args.match, c.id)]
    print(f"{len(cands)} candidates of {study.name}/{variant.id}", flush=True)
    out_dir = Path(args.build_dir or tempfile.mkdtemp(prefix="quick_tune-"))
    flags = list(project.settings["nvcc_flags"])

    def compile_one(c):
        cubin = out_dir / c.id / "kernel.cubin"
        facts = cubin.with_name("resources.json")
        if cubin.is_file() and facts.is_file():  # built by an earlier call (--build-dir)
            return c, cubin, build.Resources(**json.loads(facts.read_text())), None
        try:
            r = build.compile_variant(c, project.settings["arch"], flags, ROOT, cubin)
            facts.write_text(json.dumps(r.resources.__dict__))
            return c, cubin, r.resources, None
        except build.CompileError as e:
            return c, None, None, str(e).splitlines()[0]

    t0 = time.time()
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        built = list(pool.map(compile_one, cands))
    print(f"compiled in {time.time() - t0:.0f} s", flush=True)
    if args.compile_only:
        return 0

    slot = gpu.acquire_slot()
    rows = []
    for c, cubin, res, err in built:
        if err:
            print(f"{c.id}: compile failed: {err}", flush=True)
            continue
        info = bench.BuildInfo(cubin, build.nvcc_version(), " ".join(flags))
        got = bench.bench_variant(
            project,
            study,
            c,
            info,
            slot.uuid,
            sizes=sizes,
            tolerate_failure=True,
            log=lambda s: None,
        )
        for r in got:
            r["registers"] = res.registers
            r["spill_bytes"] = res.spill_store_bytes
            rows.append(r)
            shown = (
                f"{r['tflops']:7.2f} TFLOP/s {r['pct_of_baseline']:6.1f} % of baseline"
                if r["status"] == "ok"
                else f"{r['status']}: {r['reason']}"
            )
            print(f"{c.id} {r['size']} {res.registers} regs: {shown}", flush=True)
    import pandas as pd

    df = pd.DataFrame(rows)
    ok = df[df["status"] == "ok"].sort_values(["size", "median_ms"])
    cols = ["size", "variant", "registers", "median_ms", "tflops", "pct_of_baseline"]
    print(ok[cols].groupby("size").head(15).to_string(index=False))
    if args.out:
        df.to_parquet(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
