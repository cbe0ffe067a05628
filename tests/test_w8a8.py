"""The w8a8 study (FP8 e4m3 x and W, row-wise scales): the problem's e4m3 decoding and
quantizer against torch's float8 type, its size rule and cost model, both kernels through
the real nvcc for sm_90 (no spills; the SIMT step decodes without conversions, the
tensor-core step runs on the tensor pipe), and the SIMT step on the CPU emulator at shapes
that reach each path, every finite e4m3 value included, checked by the problem's own check.
The tensor-core step (inline PTX mma) runs only on a GPU: the GPU tests at the end (marked
gpu) bench both steps and both baselines at small and odd shapes."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from conftest import CHECK_TIMING, REPO, assert_checked, candidate_sample, compile_variants
from cuda_emu import emu_build, emu_workdir

from kernelbook import config as cfg
from kernelbook import gpu, problems
from kernelbook.problems import w8a8
from kernelbook.problems.base import Case, GuardedArray, NonFinite

torch = pytest.importorskip("torch")

ARCH = "sm_90"
FLAGS = ["-O3", "-lineinfo"]
PROJECT = cfg.load_project_file(REPO / "config" / "config.yaml", overrides={"studies": ["w8a8"]})
STUDY = PROJECT.study("w8a8")
W8 = problems.get("w8a8")
SIMT = STUDY.variant("01_simt_rows_per_warp")
# every kernel as it is built and benched: plain steps, and a tuned step's candidates
JOBS = [v for v in STUDY.variants if not v.is_tuned] + list(STUDY.candidates)


def test_e4m3_values_agree_with_torch_for_every_byte():
    b = np.arange(256, dtype=np.uint8)
    ours = w8a8.e4m3_values(np, b)
    theirs = torch.from_numpy(b).view(torch.float8_e4m3fn).to(torch.float64).numpy()
    nan = (b & 0x7F) == 0x7F
    assert np.isnan(ours[nan]).all() and np.isnan(theirs[nan]).all()
    assert (ours[~nan] == theirs[~nan]).all()
    assert ours[0x7E] == 448.0 and ours[0x01] == 2.0**-9 and ours[0xB8] == -1.0


def test_quantizer_scales_each_row_to_the_e4m3_range():
    g = torch.Generator().manual_seed(5)
    w = torch.randn(6, 256, generator=g)
    w[3] = 0.0
    q, s = w8a8.quantize_rows(w)
    assert q.dtype == torch.uint8 and q.shape == (6, 256) and s.shape == (6,)
    vals = w8a8.e4m3_values(np, q.numpy())
    assert np.abs(vals).max(axis=1)[[0, 1, 2, 4, 5]] == pytest.approx(448.0)
    assert s[3] == 1.0 and (vals[3] == 0).all()
    rel = np.abs(vals * s.numpy()[:, None] - w.numpy().astype(np.float64))
    # e4m3 keeps 3 mantissa bits: half an ulp is 1/16 of the value for normals
    tiny = 2.0**-6 * s.numpy()[:, None]  # below it, subnormal steps of 2^-9 * scale
    assert (rel <= np.maximum(np.abs(w.numpy()) / 16, tiny / 16) * 1.0001 + 1e-12).all()


def test_size_rule_cost_model_and_study():
    with pytest.raises(ValueError, match=r"size '1x64x1000': K = 1000 is not a multiple of 16"):
        W8.parse_size("1x64x1000")
    s = {"M": 16, "N": 14336, "K": 4096}
    assert W8.min_bytes(s, "float8_e4m3") == 16 * 4096 + 14336 * 4096 + 4 * (16 + 14336) + (
        2 * 16 * 14336
    )
    assert W8.flops(s) == 2 * 16 * 14336 * 4096
    assert len(STUDY.sizes) == 30 and STUDY.dtype == "float8_e4m3"
    assert STUDY.baseline == "cublas_bf16" and STUDY.extra_baselines == ("scaled_mm",)
    assert STUDY.figure_of_merit == "gbps" and STUDY.bandwidth_reference == "read"


@pytest.mark.parametrize("v", JOBS, ids=lambda v: v.id)
def test_launch_geometry_covers_every_row(v):
    d = v.defines
    rows = d["WARPS"] * d["ROWS"] if "ROWS" in d else 8 * d["NT"]
    for s in STUDY.sizes:
        (L,) = v.launches(s, sm_count=cfg.NOMINAL_SM_COUNT)
        assert L.block == (32 * d["WARPS"], 1, 1)
        assert L.grid[0] * rows >= s["N"] > (L.grid[0] - 1) * rows and L.grid[1] == 1


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return compile_variants(tmp_path_factory, "w8-cubins", JOBS, ARCH, FLAGS)


@pytest.mark.parametrize("v", JOBS, ids=lambda v: v.id)
def test_kernels_compile_without_spills_on_the_pipes_they_claim(built, v):
    res = built[v.id]
    r = res.resources
    assert r.function == v.entry
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0 and r.stack_bytes == 0, res.log
    ops = set(res.sass)
    assert "LDG.E.EF.128" in ops and "LDG.E.128.CONSTANT" in ops, sorted(ops)  # 16-byte loads
    assert not {op for op in ops if op.startswith("I2F")}, sorted(ops)
    tensor = {op for op in ops if op.startswith("HMMA")}
    if v.entry == "w8_mma_e4m3":  # 02 and 03's candidates
        assert tensor, sorted(ops)
    else:
        assert not tensor and "SHFL.BFLY" in ops and "FMUL" in ops, sorted(ops)


# ------------------------------------------------------------------------------------------
# the CPU emulator (the SIMT step; the mma step is inline PTX)

DRIVER = r"""
#include "emu.h"
#include KFILE
// argv: M N K xq.bin sx.bin Wq.bin sw.bin y.bin guard_bytes grid.x block.x
int main(int argc, char** argv) {
  const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
  const size_t guard = atol(argv[9]);
  size_t n1, n2, n3, n4, ny;
  const unsigned char* xq = (const unsigned char*)emu_slurp(argv[4], &n1);
  const float* sx = (const float*)emu_slurp(argv[5], &n2);
  const unsigned char* Wq = (const unsigned char*)emu_slurp(argv[6], &n3);
  const float* sw = (const float*)emu_slurp(argv[7], &n4);
  char* y = emu_slurp(argv[8], &ny);
  __nv_bfloat16* out = (__nv_bfloat16*)(y + guard);
  const dim3 grid{(unsigned)atoi(argv[10]), 1, 1}, block{(unsigned)atoi(argv[11]), 1, 1};
  emu_launch(grid, block, [=] { KERNEL(M, N, K, xq, sx, Wq, sw, out); });
  std::ofstream(argv[8], std::ios::binary).write(y, ny);
  return 0;
}
"""

# (M, N, K): K of one lane step and of several with a partial last round of lanes; N not a
# multiple of a warp's rows; M at the 1, 2 and 4-row tiles and past them (chunks of 4)
EMULATED = [(1, 37, 16), (2, 70, 528), (3, 9, 1040), (4, 16, 256), (7, 5, 512), (17, 3, 64)]
GUARD = 64


@pytest.fixture(scope="module")
def emu_exe(tmp_path_factory):
    d = emu_workdir(tmp_path_factory, "w8-emu", DRIVER)
    return emu_build(d, SIMT, "simt")


def _case(sizes, every_byte=False) -> Case:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    g = torch.Generator().manual_seed(M * 7919 + N * 31 + K)
    xq, sx = w8a8.quantize_rows(torch.randn(M, K, generator=g))
    Wq, sw = w8a8.quantize_rows(torch.randn(N, K, generator=g))
    xq, sx, Wq, sw = (t.numpy().copy() for t in (xq, sx, Wq, sw))
    if every_byte:  # x walks every finite e4m3 value, subnormals and negatives included
        b = np.array([v for v in range(256) if v & 0x7F != 0x7F], dtype=np.uint8)
        xq[:] = np.resize(b, xq.shape)
    y = GuardedArray(np, M * N, "bfloat16", GUARD)
    x64 = w8a8.e4m3_values(np, xq) * sx.astype(np.float64)[:, None]
    w64 = w8a8.e4m3_values(np, Wq) * sw.astype(np.float64)[:, None]
    inputs = {"xq": xq, "sx": sx, "Wq": Wq, "sw": sw}
    return Case(
        sizes=dict(sizes),
        dtype="float8_e4m3",
        seed=0,
        inputs=inputs,
        outputs={"y": y},
        reference={"y": (x64 @ w64.T).ravel()},
        args=(),
    ).ready()


def _emulate(exe, sizes, case, grid=None):
    d = exe.parent
    files = {n: d / f"{n}.bin" for n in ("xq", "sx", "Wq", "sw", "y")}
    for n in ("xq", "sx", "Wq", "sw"):
        files[n].write_bytes(case.inputs[n].tobytes())
    y = case.outputs["y"]
    files["y"].write_bytes(y.full.tobytes())
    (L,) = SIMT.launches(sizes, sm_count=cfg.NOMINAL_SM_COUNT)
    args = [sizes["M"], sizes["N"], sizes["K"], *files.values(), GUARD * 2]
    args += [grid or L.grid[0], L.block[0]]
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    y.full[:] = np.frombuffer(files["y"].read_bytes(), dtype=np.uint16)
    return case


def test_the_simt_step_runs_correctly_on_the_cpu_emulator(emu_exe, numpy_as_cupy):
    tol = W8.tolerance({}, "float8_e4m3")
    for i, (M, N, K) in enumerate(EMULATED):
        sizes = {"M": M, "N": N, "K": K}
        case = _emulate(emu_exe, sizes, _case(sizes, every_byte=i == 2))
        result = W8.check(case, tol, f"w8a8/01 at {M}x{N}x{K} (emulated)")
        assert result.rel_err < 4e-3, (sizes, result)


def test_the_emulated_check_fails_a_kernel_that_skips_rows(emu_exe, numpy_as_cupy):
    sizes = {"M": 2, "N": 64, "K": 256}
    (L,) = SIMT.launches(sizes)
    case = _emulate(emu_exe, sizes, _case(sizes), grid=L.grid[0] // 2)
    with pytest.raises(NonFinite, match="w8a8/01 at 2x64x256"):
        W8.check(case, 1e-2, "w8a8/01 at 2x64x256 (emulated)")


# ------------------------------------------------------------------------------------------
# on a GPU (marked gpu; skipped, visibly, where NVML finds none)

INFO, WHY = gpu.detect()
FAST = {"studies": ["w8a8"], "timing": CHECK_TIMING}
# small; odd N, M past a 16-row tile, a partial 64-byte K chunk; the second headline
GPU_SIZES = ["4x256x512", "17x1001x1040", "33x4096x4112", "16x14336x4096"]


GPU_JOBS = [v.id for v in STUDY.variants if not v.is_tuned] + [
    c for v in STUDY.variants if v.is_tuned for c in candidate_sample("w8a8", v.id)
]


@pytest.mark.parametrize(
    "vid",
    GPU_JOBS,
)
@pytest.mark.gpu
@pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}")
def test_both_steps_and_baselines_correct_on_the_gpu(bench_batch, vid):
    df = bench_batch(FAST, "w8a8", GPU_JOBS, GPU_SIZES, vid)
    assert len(df) == len(GPU_SIZES)
    for _, row in df.iterrows():
        assert_checked(row)
        extra = json.loads(row["extra_baselines"])["scaled_mm"]
        if "error" in extra:  # cuBLASLt refused the shape: named on the row
            assert extra["error"] and "median_ms" not in extra
        else:
            assert extra["rel_err"] < row["tolerance"] and extra["median_ms"] > 0
