"""The memory-bound studies on a CUDA device (marked gpu; skipped, visibly, where NVML finds
none): every variant of transpose, softmax and softmax_bf16 checked and timed beside its
baseline and a same-bytes cudaMemcpy, the copy kernel against cudaMemcpy, the online softmax
reading x once from DRAM (Nsight Compute), and compute-sanitizer on every variant."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import CHECK_TIMING, bench_rows, candidate_sample, kb

from kernelbook import gpu, tables

ROOT = Path(__file__).resolve().parents[1]
INFO, WHY = gpu.detect()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}")]

FAST = CHECK_TIMING
TRANSPOSE = [
    "00_copy",
    "01_naive",
    "02_smem_tiled",
    "03_smem_padded",
    "04_multi_element",
    "05_vectorized",
]
SOFTMAX = [
    "01_three_pass",
    "02_fused_block",
    "03_warp_shuffle",
    "04_online",
    "05_online_vectorized",
]
ITEMSIZE = {"softmax": 4, "softmax_bf16": 2}


TRANSPOSE_JOBS = TRANSPOSE + candidate_sample("transpose", "06_tuned")
SOFTMAX_JOBS = [(s, v) for s in ("softmax", "softmax_bf16") for v in SOFTMAX]
SOFTMAX_JOBS += [
    (s, v) for s in ("softmax", "softmax_bf16") for v in candidate_sample(s, "06_online_tuned")
]


def settings(study, timing=FAST) -> dict:
    return {"studies": [study], "timing": timing}


def bench(tmp_path, study, variant, *sizes, timing=FAST) -> pd.DataFrame:
    return bench_rows(tmp_path, settings(study, timing), study, variant, sizes)


def assert_bandwidth_columns(df: pd.DataFrame) -> None:
    ok = df[df["status"] == "ok"]
    assert len(ok), df[["size", "status", "reason"]]
    assert ok["correct"].all()
    assert (ok["rel_err"] <= ok["tolerance"]).all(), ok[["size", "rel_err", "tolerance"]]
    assert (ok["baseline_rel_err"] <= ok["tolerance"]).all(), ok[["size", "baseline_rel_err"]]
    assert ok[["gbps", "copy_median_ms", "copy_gbps", "pct_of_copy"]].notna().all().all()
    assert (ok["pct_of_copy"] > 0).all() and (ok["copy_gbps"] > 100).all()
    gbps = ok["bytes_min"] / (ok["median_ms"] * 1e-3) / 1e9
    assert ((ok["gbps"] / gbps - 1).abs() < 1e-9).all()
    assert ((ok["pct_of_copy"] / (100 * ok["gbps"] / ok["copy_gbps"]) - 1).abs() < 1e-9).all()
    assert (ok["n_samples"] >= 10).all()
    assert ok["baseline_mode"].str.startswith("torch ").all()


# ------------------------------------------------------------------------------------------
# Every variant: correct at a small and at odd shapes, with the copy ceiling beside it


@pytest.mark.parametrize("variant", TRANSPOSE_JOBS)
def test_transpose_variants(bench_batch, variant):
    sizes = ["1024", "1000x3000", "4097x4095"]
    df = bench_batch(settings("transpose"), "transpose", TRANSPOSE_JOBS, sizes, variant)
    df = df.set_index("size")
    assert_bandwidth_columns(df.reset_index())
    assert df.loc["1024x1024", "status"] == df.loc["1000x3000", "status"] == "ok"
    assert (df.loc[df["status"] == "ok", "rel_err"] == 0).all()  # bit-exact
    assert df.loc["1000x3000", "bytes_min"] == 2 * 1000 * 3000 * 4
    if variant.startswith(("05_vectorized", "06_tuned")):
        assert df.loc["4097x4095", "status"] == "skipped"
        assert df.loc["4097x4095", "reason"] == "requires M % 4 == 0 and N % 4 == 0"
    else:
        assert df.loc["4097x4095", "status"] == "ok"


@pytest.mark.parametrize(("study", "variant"), SOFTMAX_JOBS)
def test_softmax_variants(bench_batch, study, variant):
    jobs = [v for s, v in SOFTMAX_JOBS if s == study]
    sizes = ["4096x128", "4096x1000", "333x4099"]
    df = bench_batch(settings(study), study, jobs, sizes, variant).set_index("size")
    assert_bandwidth_columns(df.reset_index())
    assert (df["dtype"] == ("float32" if study == "softmax" else "bfloat16")).all()
    assert df.loc["4096x128", "status"] == df.loc["4096x1000", "status"] == "ok"
    assert df.loc["4096x1000", "bytes_min"] == 2 * 4096 * 1000 * ITEMSIZE[study]
    if variant.startswith(("05_online_vectorized", "06_online_tuned")):
        assert df.loc["333x4099", "status"] == "skipped"
        assert df.loc["333x4099", "reason"] == "requires N % VEC == 0"
    else:
        assert df.loc["333x4099", "status"] == "ok"
    ran = df[df["status"] == "ok"]  # a skipped size has no baseline either
    assert ran["baseline_mode"].str.contains("softmax").all()


@pytest.mark.parametrize("study", ["softmax", "softmax_bf16"])
def test_softmax_long_rows(tmp_path, study):
    # 05's two paths at the long-row shape: registers (bf16) and the L2 re-read (float32)
    df = bench(tmp_path, study, "05_online_vectorized", "4096x65536", "64x66560")
    assert_bandwidth_columns(df)
    assert (df["status"] == "ok").all()


# ------------------------------------------------------------------------------------------
# The ceiling and the ladder's ends


def test_copy_kernel_is_within_a_few_percent_of_cudamemcpy(tmp_path):
    df = bench(tmp_path, "transpose", "00_copy", "8192", "16384", timing={})
    assert_bandwidth_columns(df)
    for _, r in df.iterrows():
        assert 93 <= r["pct_of_copy"] <= 107, (r["size"], r["pct_of_copy"], r["copy_gbps"])


def test_vectorized_transpose_beats_naive_beyond_l2(tmp_path):
    naive = bench(tmp_path, "transpose", "01_naive", "8192", timing={})
    vec = bench(tmp_path, "transpose", "05_vectorized", "8192", timing={})
    assert float(vec["gbps"].iloc[0]) > 1.2 * float(naive["gbps"].iloc[0])


# ------------------------------------------------------------------------------------------
# Nsight Compute: the online softmax reads x once from DRAM


def _bytes(value: float, unit: str | None) -> float:
    scale = {None: 1, "": 1, "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}
    scale |= {"KB": 1e3, "MB": 1e6, "GB": 1e9, "B": 1}
    return float(value) * scale[unit]


def _profile(tmp_path, study, variant) -> pd.DataFrame:
    build_dir = tmp_path / "build"
    cubin = build_dir / variant / "kernel.cubin"
    kb("compile", study, variant, "--cubin", str(cubin), settings=settings(study))
    out = tmp_path / "profile.parquet"
    kb(
        "profile",
        study,
        variant,
        "--build-dir",
        str(build_dir),
        "--reports",
        str(tmp_path / "reports"),
        "--out",
        str(out),
        settings=settings(study),
    )
    assert list((tmp_path / "reports").glob("*.ncu-rep")), "the .ncu-rep is kept"
    return tables.read(out)


@pytest.mark.parametrize("study", ["softmax", "softmax_bf16"])
@pytest.mark.parametrize("variant", ["04_online", "05_online_vectorized"])
def test_online_softmax_reads_x_once(tmp_path, study, variant):
    df = _profile(tmp_path, study, variant)
    reads = df[df["metric"] == "dram__bytes_read.sum"]
    writes = df[df["metric"] == "dram__bytes_write.sum"]
    assert set(reads["size"]) == {"4096x16384", "4096x65536"}
    # both sizes from one ncu process: report action i is size i (the bytes below tell)
    assert set(df["report"]) == {"4096x16384+4096x65536.ncu-rep"}
    ratios = {}
    for _, r in reads.iterrows():
        minimum = r["R"] * r["N"] * ITEMSIZE[study]
        ratios[r["size"]] = _bytes(r["value"], r["unit"]) / minimum
    for _, w in writes.iterrows():
        # y once at most (L2 is write-back: lines still dirty when the kernel ends are not
        # counted, so there is no lower bound)
        minimum = w["R"] * w["N"] * ITEMSIZE[study]
        assert _bytes(w["value"], w["unit"]) / minimum < 1.1, (w["size"], w["value"])
    # the guarantee: at 4096 x 16384 every variant's re-read is an L2 hit; at 65536, 05 keeps
    # bf16 rows in registers and re-reads float32 rows from L2 with one 1024-thread block per SM
    assert 0.9 < ratios["4096x16384"] < 1.1, ratios
    if variant == "05_online_vectorized":
        assert 0.9 < ratios["4096x65536"] < 1.1, ratios


def test_naive_transpose_shows_its_store_sectors(tmp_path):
    df = _profile(tmp_path, "transpose", "01_naive").set_index("metric")["value"]
    st = df["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"]
    st /= df["l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"]
    ld = df["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"]
    ld /= df["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"]
    assert st > 30, st  # every store its own sector
    assert ld < 5, ld  # loads coalesced


# ------------------------------------------------------------------------------------------
# compute-sanitizer: every variant clean on exact-size allocations


# The quick tier runs each study's vectorized step (the one with the widest accesses); the
# other variants are the slow tier's, as the book's own sanitize jobs run every variant.
SANITIZED_QUICK = {"05_vectorized", "05_online_vectorized"}


@pytest.mark.parametrize(
    ("study", "variant"),
    [
        pytest.param(s, v, marks=() if v in SANITIZED_QUICK else pytest.mark.slow)
        for s, v in [("transpose", v) for v in TRANSPOSE_JOBS] + SOFTMAX_JOBS
    ],
)
def test_sanitizer_clean(tmp_path, study, variant):
    build_dir = tmp_path / "build"
    kb(
        "compile",
        study,
        variant,
        "--cubin",
        str(build_dir / variant / "kernel.cubin"),
        settings=settings(study),
    )
    out = tmp_path / "sanitizer.parquet"
    kb(
        "sanitize",
        study,
        variant,
        "--build-dir",
        str(build_dir),
        "--out",
        str(out),
        settings=settings(study),
    )
    df = tables.read(out).set_index("tool")
    assert set(df.index) == {"memcheck", "racecheck", "initcheck", "synccheck"}
    assert (df["verdict"] == "clean").all(), df[["verdict", "errors", "first_finding"]]
