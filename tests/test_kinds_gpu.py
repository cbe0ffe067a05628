"""Each variant kind at a small and an odd size, through the real CLI (needs a GPU)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import CHECK_TIMING, copy_env
from test_kinds import kinds_repo

from kernelbook import gpu, tables

INFO, WHY = gpu.detect()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}")]
FAST = {"timing": CHECK_TIMING}


def kb(root, *args):
    cmd = [sys.executable, "-m", "kernelbook", "--settings", json.dumps(FAST), *args]
    env = copy_env(root)  # the copy's src first, the rest of the path kept
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize("variant", ["01_cuda", "02_triton", "03_torch"])
def test_each_kind_is_checked_and_timed(tmp_path, variant):
    root = kinds_repo(tmp_path / "repo")
    out = tmp_path / "m.parquet"
    kb(root, "bench", "kinds", variant, "--size", "64", "--size", "100x70x33", "--out", str(out))
    df = tables.read(out)
    assert list(df["status"]) == ["ok", "ok"], df[["status", "reason"]]
    assert (df["rel_err"] < df["tolerance"]).all() and (df["n_samples"] >= 10).all()
    assert df["baseline_median_ms"].notna().all() and df["gpu_uuid"].str.startswith("GPU-").all()
    if variant == "03_torch":
        assert df["grid"].isna().all() and (df["cubin_sha256"] == "").all()
    else:
        assert df["block"].notna().all()
    if variant == "02_triton":
        assert df["nvcc_version"].str.startswith("triton ").all()
        assert df["software"].str.contains("triton").all()
    kb(root, "launch", "kinds", variant, "--size", "100x70x33", "--check")


def test_a_batch_records_a_variant_that_does_not_compile_and_runs_the_rest(tmp_path):
    """`kernelbook bench` of several variants with --record-failure: every one is built
    before the GPU is taken, and one whose compile fails gets failed rows (failure
    'compile', the compiler's first line), the others checked and timed as usual."""
    root = kinds_repo(tmp_path / "repo", broken=True)
    out = tmp_path / "m.parquet"
    proc = kb(root, "bench", "kinds", "04_broken", "01_cuda", "--size", "64",
              "--record-failure", "--out", str(out))  # fmt: skip
    df = tables.read(out).set_index("variant")
    assert list(df.index) == ["04_broken", "01_cuda"], df[["status", "reason"]]
    assert df.loc["04_broken", "status"] == "failed" and df.loc["04_broken", "failure"] == "compile"
    assert "triton failed on kernels/kinds/04_broken.py" in df.loc["04_broken", "reason"]
    assert df.loc["01_cuda", "status"] == "ok"
    assert "kinds/04_broken: compile failed" in proc.stderr


@pytest.mark.parametrize(
    "study, variant, sizes",
    [
        ("softmax", "07_triton__BLOCK_N1024_NUM_WARPS4", ["4096x1000", "333x4099"]),
        ("softmax_bf16", "07_triton__BLOCK_N4096_NUM_WARPS8", ["4096x128", "333x4099"]),
        (
            "sgemm",
            "14_triton__BLOCK_M64_BLOCK_N64_BLOCK_K32_NUM_WARPS4_NUM_STAGES3",
            ["128", "127x129x131"],
        ),
    ],
)
def test_triton_ladder_steps(tmp_path, study, variant, sizes):
    from conftest import REPO

    out = tmp_path / "m.parquet"
    args = ["bench", study, variant, "--out", str(out)]
    for s in sizes:
        args += ["--size", s]
    kb(REPO, *args)
    df = tables.read(out)
    assert list(df["status"]) == ["ok", "ok"], df[["status", "reason"]]
