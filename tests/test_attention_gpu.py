"""The attention study on the GPU: every variant correct (O and the logsumexp L) at a small
shape and at an odd one, causal and not, beside both SDPA baselines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import CHECK_TIMING, sanitizer_rows
from test_gpu import INFO, WHY, bench
from test_hgemm_gpu import _hopper

from kernelbook import config
from kernelbook.problems import get

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}")]

ROOT = Path(__file__).resolve().parents[1]
STUDY = config.load_project_file(
    ROOT / "config" / "config.yaml", overrides={"studies": ["attention"]}
).study("attention")
ATT = get("attention")
QUICK = {"timing": {**CHECK_TIMING, "min_samples": 5}}
VARIANTS = [
    "01_naive",
    "02_fused_row",
    "03_flash_simt",
    "04_fa2_mma",
    "05_fa2_pipelined",
    "06_fa2_causal_skip",
    "07_wgmma_tma",
    "08_warp_specialized",
    "09_pingpong",
    "10_intra_overlap",
    "11_fast_exp2",
    "12_autotuned__BN64_STAGES4",  # the 64-key tile (the tuned step runs one winner)
    "13_fma_exp2",
    "14_three_warpgroups",  # D = 64 only: its D = 128 sizes are skipped rows
    "15_persistent",
    "16_persistent_fma_exp2",  # D = 64 only, as 14
    "17_d64_tuned__POLY2_STAGES3",  # 16 with half the pairs on the cubic and a 3-stage ring
]
# small, both head sizes; odd S (not a multiple of any tile) and B*H > 1, causal and not
SIZES = [
    "B=2,H=2,S=256,D=64,causal=0",
    "B=1,H=2,S=256,D=128,causal=1",
    "B=2,H=3,S=1000,D=128,causal=0",
    "B=1,H=2,S=77,D=64,causal=1",
]


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_correct_at_small_and_odd_shapes(bench_batch, variant):
    df = bench_batch(QUICK, "attention", VARIANTS, SIZES, variant)
    v = STUDY.variant(variant)
    expected = ["skipped" if v.unmet(ATT.parse_size(s)) else "ok" for s in SIZES]
    assert list(df["status"]) == expected, df[["size", "status", "reason"]]
    df = df[df["status"] == "ok"]
    assert len(df) >= 2  # every variant runs at two sizes at least
    assert (df["rel_err"] < df["tolerance"]).all()
    assert (df["baseline_rel_err"] < df["tolerance"]).all()
    for S, text in zip(df["S"], df["extra_baselines"], strict=True):
        extra = json.loads(text)["sdpa_cudnn"]
        if "error" in extra and S % 64:  # cuDNN may refuse odd lengths: named, not fatal
            continue
        assert extra["median_ms"] > 0 and extra["rel_err"] < 1e-2, extra
    assert "FLASH_ATTENTION" in df["baseline_mode"].iloc[0]


def test_odd_head_size_is_skipped_visibly(tmp_path):
    df = bench(
        tmp_path, "04_fa2_mma", "B=1,H=1,S=128,D=96,causal=0", settings=QUICK, study="attention"
    )
    assert list(df["status"]) == ["skipped"]
    assert "D == 64 or D == 128" in df["reason"].iloc[0]


@pytest.mark.parametrize(
    "variant",
    ["07_wgmma_tma", "09_pingpong", "10_intra_overlap", "14_three_warpgroups", "15_persistent"],
)
def test_the_tma_steps_are_clean_under_every_sanitizer_tool(tmp_path, variant):
    """The Hopper steps launch through cuda-bindings with three tensor maps; device-side,
    their TMA copies, mbarrier waits, named barriers and wgmmas leave every tool nothing to
    report (07: one block barrier a tile; 09: a producer warpgroup and turns; 10: two wgmma
    groups in flight, K and V freed apart; 14: three consumer warpgroups taking turns; 15: a
    persistent block, two Q buffers and the ring running on across query tiles)."""
    if not _hopper():
        pytest.skip(f"{variant} is built for sm_90a: needs a Hopper GPU")
    df = sanitizer_rows(tmp_path, "attention", variant)
    assert set(df.index) == {"memcheck", "racecheck", "initcheck", "synccheck"}
    assert (df["verdict"] == "clean").all(), df[["verdict", "errors", "first_finding"]]


# One warpgroup, one product through fa3.cuh's own helpers: O (64 x D) = P (64 x KEYS) · V
# (KEYS x D) with P from registers (the mma A-fragment layout) and V written into shared
# memory as TMA's 128-byte swizzle lays it out (D / 64 halves of KEYS rows of 128 bytes, chunk
# c of row r at c ^ (r % 8)), read through the transposed-B descriptor, 16 keys a wgmma.
PROBE = r"""
#include "fa3.cuh"
extern "C" __global__ void __launch_bounds__(128, 1)
PROBE_NAME(const __nv_bfloat16* P, const __nv_bfloat16* V, float* O) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* sv = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int i = tid; i < PK * PD; i += 128) {
    const int r = i / PD, d = i % PD, h = d / 64, c = d % 64;
    const int off = h * PK * 128 + r * 128 + (((c / 8) ^ (r % 8)) * 16) + (c % 8) * 2;
    *reinterpret_cast<__nv_bfloat16*>(sv + off) = V[i];
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  float o[PD / 2];
  for (int i = 0; i < PD / 2; ++i) o[i] = 0.f;
  auto p = [&](int r, int c) { return P[r * PK + c]; };
  const int r0 = 16 * warp + g;
#pragma unroll
  for (int k = 0; k < PK / 16; ++k) {
    const int c0 = 16 * k + 2 * t;
    __nv_bfloat162 a0 = {p(r0, c0), p(r0, c0 + 1)}, a1 = {p(r0 + 8, c0), p(r0 + 8, c0 + 1)};
    __nv_bfloat162 a2 = {p(r0, c0 + 8), p(r0, c0 + 9)};
    __nv_bfloat162 a3 = {p(r0 + 8, c0 + 8), p(r0 + 8, c0 + 9)};
    const uint32_t a[4] = {*reinterpret_cast<uint32_t*>(&a0), *reinterpret_cast<uint32_t*>(&a1),
                           *reinterpret_cast<uint32_t*>(&a2), *reinterpret_cast<uint32_t*>(&a3)};
    // a[] was just written: the fence orders it (and O) before the wgmma that reads it, as the
    // PTX rules ask of every A fragment in registers, not only the first
    wgmma_fence();
    fa3::wgmma_rs_tb<PD>(o, a, fa3::sw128_desc_nmajor(sv + 2048 * k, PK * 128), k > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  for (int n = 0; n < PD / 8; ++n)
    for (int h = 0; h < 2; ++h)
      for (int e = 0; e < 2; ++e) O[(r0 + 8 * h) * PD + 8 * n + 2 * t + e] = o[4 * n + 2 * h + e];
}
"""


@pytest.mark.parametrize("keys, d", [(16, 64), (128, 128), (128, 64)])
def test_the_transposed_b_wgmma_reads_v_as_tma_lays_it_out(tmp_path, keys, d):
    """The P·V product of the Hopper steps alone: a wrong leading or stride byte offset, or a
    wrong slice step, scrambles rows or columns of O against numpy's P @ V."""
    if not _hopper():
        pytest.skip("wgmma needs a Hopper GPU (sm_90a)")
    import cupy as cp

    # a file and a kernel name of each shape's own: in one process, the case after another
    # once ran the earlier case's kernel (its O matched P.V read with the (16, 64) strides to
    # 4 decimals), the file and the kernel loaded through CuPy's RawModule by the same names
    name = f"probe_pv_{keys}_{d}"
    src = tmp_path / f"{name}.cu"
    src.write_text(PROBE)
    cubin = tmp_path / f"{name}.cubin"
    subprocess.run(
        ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-cubin", f"-DPK={keys}",
         f"-DPD={d}", f"-DPROBE_NAME={name}", f"-I{ROOT / 'kernels' / 'attention'}",
         "-o", str(cubin), str(src)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    rng = np.random.default_rng(20261202)
    p = rng.standard_normal((64, keys)).astype(np.float32)
    v = rng.standard_normal((keys, d)).astype(np.float32)
    bf = lambda x: (x.view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731 (truncate to bf16)
    back = lambda b: (b.astype(np.uint32) << 16).view(np.float32)  # noqa: E731
    pb, vb = bf(p), bf(v)
    out = cp.zeros((64, d), dtype=cp.float32)
    kern = cp.RawModule(path=str(cubin)).get_function(name)
    smem = keys * d * 2 + 1024
    kern.max_dynamic_shared_size_bytes = smem
    kern((1,), (128,), (cp.asarray(pb), cp.asarray(vb), out), shared_mem=smem)
    want = back(pb).astype(np.float64) @ back(vb).astype(np.float64)
    np.testing.assert_allclose(cp.asnumpy(out), want, rtol=1e-5, atol=1e-4)
