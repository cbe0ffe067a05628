"""Is it faster, on the GPU (marked gpu; skipped, visibly, where NVML finds none): a throwaway
study of nvcc-compiled copy kernels under tmp_path, benched by `kernelbook bench` into real
Parquet tables and read by the real `kernelbook compare` and the page.

- the same kernel timed twice (two bench runs) is the *same*;
- the kernel edited to read its input twice (1.5x the bytes at a size far beyond L2) is
  *slower* than before the edit;
- on the page, two variants of identical source are the *same* and the read-twice one
  *slower*, as their `claims:` say;
- a tuned variant's row is timed again in its own job: the samples table's job column keeps
  those samples apart from the winner's tuning job's (snakemake's bench stage).

Each bench is one process of a few seconds: a copy of 2 x 256 MiB, sampled until the
median's relative standard error is 0.1 % (the interval must fit within +-1 % for *same*).
Run alone, so that no other GPU work shares the device with the timing:

    python -m pytest tests/test_gpu_compare.py -n 0
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from kernelbook import gpu, layout, tables
from kernelbook.report import compare, publish
from kernelbook.report.markdown import parse_tables

ROOT = Path(__file__).resolve().parents[1]
INFO, WHY = gpu.detect()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}"),
    pytest.mark.xdist_group("gpu_compare"),  # one worker: the benches run once, one at a time
]

STUDY = "cmp"
SIZE = "8192x8192"  # 256 MiB in, 256 MiB out: far beyond L2, so a second read is DRAM's
# enough samples that two runs of one kernel agree to within +-1 %, interval included
TIGHT = {"min_samples": 200, "target_rse": 0.001, "min_time_s": 0.5, "max_time_s": 20}

# The transpose problem's ABI (entry(M, N, in, out)), checked as its `copy` (out = in).
PLAIN = r"""
// copy: out = in, one float a thread, both sides coalesced.
extern "C" __global__ void copy(int M, int N, const float* __restrict__ in,
                                float* __restrict__ out) {
  const size_t n = (size_t)M * N;
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}
"""
# The same copy with an extra pass over memory: each thread also reads the element half the
# matrix away, whose value only picks a branch that a finite input never takes (the check's
# inputs are normal deviates), so the load stays and out = in still holds.
TWICE = r"""
// copy reading its input twice: out = in, plus a read of in half the matrix away.
extern "C" __global__ void copy(int M, int N, const float* __restrict__ in,
                                float* __restrict__ out) {
  const size_t n = (size_t)M * N;
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float a = in[i];
    const float b = in[(i + n / 2) % n];
    out[i] = b != b ? b : a;
  }
}
"""


def variant(vid: str, source: str, **more) -> dict:
    return {
        "id": vid,
        "source": source,
        "entry": "copy",
        "computes": "copy",
        "defines": {"BLOCK": 256},
        "grid": ["cdiv(M * N, BLOCK)"],
        "block": ["BLOCK"],
        **more,
    }


CMP = {
    "title": "The same copy twice, and a copy that reads twice",
    "problem": "transpose",
    "dtype": "float32",
    "sizes": [{"M": 8192, "N": 8192}],
    "headline": {"M": 8192, "N": 8192},
    "baseline": "torch",
    "timing": TIGHT,
    "variants": [
        # torch's transpose moves the same bytes with one side strided: a copy beats it
        variant("01_copy", "kernels/cmp/copy.cu", claims={"baseline": "faster"}),
        variant("02_copy_again", "kernels/cmp/copy.cu", says="01, once more", claims="same"),
        variant(
            "03_read_twice",
            "kernels/cmp/twice.cu",
            says="01 with a second read of the input",
            claims={"previous": "slower", "01_copy": "slower"},
        ),
    ],
}


def make_root(root: Path, name: str, study: dict) -> Path:
    """A project root (or a copy of the repository) with only the throwaway study in its
    config/config.yaml, the study's file and its kernels."""
    conf = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    conf["studies"] = [name]
    (root / "config" / "studies").mkdir(parents=True, exist_ok=True)
    (root / "config" / "config.yaml").write_text(yaml.safe_dump(conf))
    (root / "config" / "studies" / f"{name}.yaml").write_text(yaml.safe_dump(study))
    (root / "kernels" / "cmp").mkdir(parents=True, exist_ok=True)
    (root / "kernels" / "cmp" / "copy.cu").write_text(PLAIN)
    (root / "kernels" / "cmp" / "twice.cu").write_text(TWICE)
    return root


def kb(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kernelbook", "--configfile", str(root / "config/config.yaml")]
    proc = subprocess.run([*cmd, *args], cwd=root, capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, f"kernelbook {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def bench(root: Path, vid: str, side: str) -> Path:
    """`kernelbook bench` of one variant (compiled by nvcc now) into <side>/: a folder with a
    measurements.parquet and a samples.parquet, what `kernelbook compare` reads."""
    out = root / "runs" / side
    out.mkdir(parents=True)
    kb(root, "bench", STUDY, vid, "--size", SIZE, "--out", str(out / "measurements.parquet"),
       "--samples-out", str(out / "samples.parquet"))  # fmt: skip
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every bench of this module, once: 01_copy twice, 02 and 03 for the ladder, and
    01_copy again after its source was edited to read its input twice."""
    root = make_root(tmp_path_factory.mktemp("cmp"), STUDY, CMP)
    got = {side: bench(root, vid, side) for side, vid in [
        ("first", "01_copy"), ("second", "01_copy"),
        ("again", "02_copy_again"), ("twice", "03_read_twice"),
    ]}  # fmt: skip
    (root / "kernels" / "cmp" / "copy.cu").write_text(TWICE)  # the edit
    got["edited"] = bench(root, "01_copy", "edited")
    return root, got


def compare_cli(root: Path, a: Path, b: Path) -> pd.DataFrame:
    """`kernelbook compare A B --out`: its comparison table."""
    out = root / "runs" / f"{a.name}-vs-{b.name}"
    proc = kb(root, "compare", str(a), str(b), "--out", str(out))
    print(proc.stdout)
    return tables.read(f"{out}.parquet")


def test_the_same_kernel_timed_twice_is_the_same(runs):
    root, got = runs
    t = compare_cli(root, got["first"], got["second"])
    assert list(t["variant"]) == ["01_copy"] and list(t["size"]) == [SIZE]
    r = t.iloc[0]
    assert r["interval_from"] == "samples"
    assert r["verdict"] == "same", r.to_dict()
    assert 0.99 <= r["speed_lo"] <= r["speed_b_over_a"] <= r["speed_hi"] <= 1.01


def test_a_kernel_that_reads_its_input_twice_is_slower(runs):
    root, got = runs
    t = compare_cli(root, got["first"], got["edited"])
    r = t.iloc[0]
    assert r["verdict"] == "slower", r.to_dict()
    # 1.5x the bytes of a DRAM-bound copy: about 1 / 1.5, far below the +-1 % band
    assert 0.5 < r["speed_hi"] < 0.9, r.to_dict()
    a = tables.read(got["first"] / "measurements.parquet").iloc[0]
    b = tables.read(got["edited"] / "measurements.parquet").iloc[0]
    assert a["source_sha256"] != b["source_sha256"] and b["correct"]
    # the other way round it is faster, and --fail-on says so by its exit status
    assert compare_cli(root, got["edited"], got["first"]).iloc[0]["verdict"] == "faster"
    a, b = str(got["first"]), str(got["edited"])
    proc = kb(root, "compare", a, b, "--fail-on", "slower", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert kb(root, "compare", a, str(got["second"]), "--fail-on", "slower,faster").returncode == 0


def test_the_page_checks_each_steps_claims(runs):
    """The ladder's verdicts on the measured tables: 02 (identical source) the same as 01,
    03 slower than both, 01 faster than torch's transpose, each as its `claims:` say; the
    read-first list then names no claim."""
    root, got = runs
    tables = root / "runs" / "page"
    tables.mkdir()
    sides = [got[s] for s in ("first", "again", "twice")]
    for name in ("measurements", "samples"):
        kb(root, "gather", name, str(tables / f"{name}.parquet"),
           *(str(s / f"{name}.parquet") for s in sides))  # fmt: skip
    kb(root, "meta", STUDY, "--out", str(tables / "study.json"))
    assert json.loads((tables / "study.json").read_text())["variants"][1]["claims"] == {
        "previous": "same"
    }
    paths = {k: tables / f"{k}.parquet" for k in ("measurements", "samples")}
    publish.render_tables({**paths, "meta": tables / "study.json"}, root / "page", STUDY)
    md = (root / "page" / "worklog.md").read_text()
    first = md.split("## Read this first", 1)[1].split("## The ladder", 1)[0]
    assert "claims to be" not in first, first
    ladder = next(t for t in parse_tables(md) if t and "vs previous" in t[0])
    verdicts = {r["variant"]: (r["vs previous"], r["vs torch"]) for r in ladder}
    assert verdicts["02_copy_again"][0] == "same", verdicts
    assert verdicts["03_read_twice"][0] == "slower", verdicts
    assert verdicts["01_copy"][1] == "faster", verdicts
    assert "The same speed as 01_copy: measured same (" in md
    assert "Slower than 02_copy_again: measured slower (" in md
    assert "Slower than 01_copy: measured slower (" in md
    assert "Faster than torch (the baseline): measured faster (" in md


TUNED = {
    "title": "A tuned copy: its winner re-timed in its own job",
    "problem": "transpose",
    "dtype": "float32",
    "sizes": [{"M": 8192, "N": 8192}, {"M": 4096, "N": 4096}],
    "headline": {"M": 8192, "N": 8192},
    "baseline": "torch",
    "timing": {"min_time_s": 0.05, "max_time_s": 2},
    "variants": [
        {
            **variant("01_tuned", "kernels/cmp/copy.cu"),
            "defines": {},
            "tune": {"sizes": [{"M": 8192, "N": 8192}], "space": {"BLOCK": [128, 256]}},
        }
    ],
}


def test_a_tuned_rows_samples_are_its_own_jobs(tmp_path):
    """snakemake's bench stage of a tuned variant of two candidates: each candidate's job
    at the tune size, then the tuned variant's job, which re-times the winner there and runs
    it at the other size. The job column tells the winner's two measurements apart, and the
    tuned row's interval is made of its own samples only."""
    from conftest import copy_env, copy_repo

    root = make_root(copy_repo(tmp_path / "repo"), "cmp_tuned", TUNED)
    paths = layout.result_paths("results", INFO.slug, "cmp_tuned")
    targets = [str(paths["measurements"]), str(paths["samples"])]
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", *targets],
        cwd=root, env=copy_env(root), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    meas = tables.read(root / paths["measurements"])
    samples = tables.read(root / paths["samples"])
    assert samples["job"].notna().all() and compare.has_jobs(samples)
    cands = {"01_tuned__BLOCK128", "01_tuned__BLOCK256"}
    assert set(samples["job"]) == cands | {"01_tuned"}
    tuned = meas[meas["variant_kind"] == "tuned"].set_index("size")
    head = tuned.loc[SIZE]
    winner = head["tuned_from"]
    assert winner in cands and pd.notna(head["selected_median_ms"])  # confirmed at 8192^2
    mine = samples[(samples["job"] == "01_tuned") & (samples["function"] == "variant")]
    assert set(mine["variant"]) == {winner}  # the candidate that ran, in the tuned job
    idx = compare.indexed(samples)
    for size, row in tuned.iterrows():
        own = compare.row_samples(idx, row.to_dict() | {"size": size})["variant"]
        assert len(own) == int(row["n_samples"]), size
        assert np.median(own) == pytest.approx(float(row["median_ms"]), rel=1e-5)
    # the winner's tuning job: its own samples, its own row, the selection's median
    cand = meas[(meas["variant"] == winner) & (meas["size"] == SIZE)].iloc[0]
    tuning = samples[samples["job"] == winner]
    tuning = tuning[(tuning["function"] == "variant") & (tuning["size"] == SIZE)]
    assert len(tuning) == int(cand["n_samples"])
    assert tuning["ms"].median() == pytest.approx(float(head["selected_median_ms"]), rel=1e-5)
    # 4096^2 was not tuned: the pick's winner ran there in the tuned job only
    assert samples[(samples["job"] != "01_tuned") & (samples["size"] == "4096x4096")].empty
