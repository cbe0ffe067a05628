"""The hgemm study on a GPU (marked gpu; skipped, visibly, where NVML finds none): every
variant (a tuned one through a sample of its candidates) is checked against the float64
reference at a small and at odd shapes, through the same bench command the pipeline runs.

The sm_90a steps (06-10) need a Hopper GPU; elsewhere they are skipped with the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CHECK_TIMING, assert_checked, candidate_sample, sanitizer_rows

from kernelbook import gpu

ROOT = Path(__file__).resolve().parents[1]
INFO, WHY = gpu.detect()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}")]

FAST = {"timing": CHECK_TIMING}
# small; odd M and N (scalar stores at the right edge, zero-filled TMA rows) with K not a
# multiple of the 64-wide K tile; a block row entirely past M (the second block of a cluster
# loads only zeros); more tiles than SMs (persistent blocks loop)
SIZES = ["512", "999x1001x504", "100x300x72", "4096x4096x512"]


def _jobs() -> list[str]:
    from kernelbook import config

    study = config.load_project_file(
        ROOT / "config" / "config.yaml", overrides={"studies": ["hgemm"]}
    ).study("hgemm")
    out = [v.id for v in study.variants if not v.is_tuned]
    for v in study.variants:
        if v.is_tuned:
            out += candidate_sample("hgemm", v.id)
    return out


def _hopper() -> bool:
    import cupy as cp

    return cp.cuda.Device(0).compute_capability == "90"


JOBS = _jobs()


@pytest.mark.parametrize("variant", JOBS)
def test_every_hgemm_variant_correct_at_a_small_and_odd_shapes(bench_batch, variant):
    from kernelbook import config

    study = config.load_project_file(
        ROOT / "config" / "config.yaml", overrides={"studies": ["hgemm"]}
    ).study("hgemm")
    v = study.variant(variant)
    hopper = _hopper()
    if v.target("sm_90") == "sm_90a" and not hopper:
        pytest.skip(f"{variant} is built for sm_90a: needs a Hopper GPU")
    # one bench process for every step this GPU can run
    runs = [j for j in JOBS if hopper or study.variant(j).target("sm_90") != "sm_90a"]
    df = bench_batch(FAST, "hgemm", runs, SIZES, variant)
    for _, row in df.iterrows():
        sizes = {n: int(row[n]) for n in ("M", "N", "K")}
        if v.unmet(sizes):
            assert row["status"] == "skipped", row[["size", "status", "reason"]]
            continue
        assert_checked(row)
        assert "bf16" in row["baseline_mode"]
    if v.arch == "sm_90a":
        assert (df["arch"] == "sm_90a").all()
        assert (df["status"] == "ok").all(), "the sm_90a steps handle every shape with K % 8 == 0"


@pytest.mark.parametrize("variant", ["06_wgmma_tma", "09_cluster_multicast"])
def test_tma_variants_are_clean_under_every_sanitizer_tool(tmp_path, variant):
    """A TMA variant's launch goes through cuda-bindings, whose entry-point probing
    memcheck once counted as 34 API errors; device-side, every tool finds nothing."""
    if not _hopper():
        pytest.skip(f"{variant} is built for sm_90a: needs a Hopper GPU")
    df = sanitizer_rows(tmp_path, "hgemm", variant)
    assert set(df.index) == {"memcheck", "racecheck", "initcheck", "synccheck"}
    assert (df["verdict"] == "clean").all(), df[["verdict", "errors", "first_finding"]]
    assert (df["exit_code"] == 0).all()
