"""The paged_decode study (one query token a sequence, GQA, a KV cache in shuffled 16-token
pages): the problem's lengths, pages and reference, its cost model, the kernels through the
real nvcc for sm_90 (no spills; 8-byte streaming loads of the cache, or 16-byte cp.async
copies into shared memory), the split count at every size, and every step run on the CPU
emulator (tests/cuda_emu.py: a 3-D grid, then the combine kernel) at lengths that reach each
path (one token, a partial page, a split past a sequence's end, a warp's ring of pages
wrapping), checked by the problem's own check. The GPU tests at the end (marked gpu) bench
every step beside SDPA at small and odd sizes."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from conftest import CHECK_TIMING, REPO, assert_checked, compile_variants
from cuda_emu import emu_build, emu_workdir

from kernelbook import config as cfg
from kernelbook import gpu, problems
from kernelbook.problems import paged_decode as pd_
from kernelbook.problems.base import NonFinite
from kernelbook.problems.bf16 import bf16_values

ARCH = "sm_90"
FLAGS = ["-O3", "-lineinfo"]
PROJECT = cfg.load_project_file(
    REPO / "config" / "config.yaml", overrides={"studies": ["paged_decode"]}
)
STUDY = PROJECT.study("paged_decode")
PD = problems.get("paged_decode")


def test_lengths_mix_within_a_batch_and_are_fixed_per_size():
    for B, L in ((1, 1024), (8, 1000), (64, 16384)):
        n = pd_.lengths(B, L)
        assert len(n) == B and n[0] == L and all(L // 2 <= x <= L for x in n)
        assert n == pd_.lengths(B, L)
    assert len(set(pd_.lengths(64, 16384))) > 50
    assert any(x % pd_.P for x in pd_.lengths(64, 16384))


def test_cost_model_counts_every_cached_key_and_value_once():
    s = {"B": 8, "L": 1000}
    n = pd_.lengths(8, 1000)
    pages = sum(-(-x // 16) for x in n)
    assert PD.min_bytes(s, "bfloat16") == 2 * sum(n) * 8 * 128 * 2 + 2 * 2 * 8 * 32 * 128 + 4 * (
        pages + 8
    )
    assert PD.flops(s) == 4 * sum(n) * 32 * 128


def _case(B, L, seed=0):
    rng = np.random.default_rng(B * 1000 + L)

    class Gen:  # the CuPy Generator's call, on NumPy
        def standard_normal(self, n, dtype):
            return rng.standard_normal(n).astype(dtype)

    return PD.build_case(np, {"B": B, "L": L}, "bfloat16", seed, Gen(), guard=64)


def test_pages_are_shuffled_and_the_reference_is_attention_over_them():
    case = _case(3, 100)
    lens = [int(x) for x in case.inputs["lens"]]
    table = case.inputs["table"]
    counts = [-(-n // 16) for n in lens]
    used = np.concatenate([table[b, : counts[b]] for b in range(3)])
    assert sorted(used) == list(range(sum(counts)))  # every pool page once
    assert (used != np.arange(len(used))).any()  # not in order
    assert all((table[b, counts[b] :] == -1).all() for b in range(3))
    # sequence 2, query head 13 (KV head 3), by a plain loop over its tokens
    q = bf16_values(np, case.inputs["Q"]).reshape(3, 32, 128).astype(np.float64)
    k = bf16_values(np, case.inputs["K"]).reshape(-1, 16, 8, 128)
    v = bf16_values(np, case.inputs["V"]).reshape(-1, 16, 8, 128)
    b, h = 2, 13
    keys = np.array([k[table[b, t // 16], t % 16, h // 4] for t in range(lens[b])], np.float64)
    vals = np.array([v[table[b, t // 16], t % 16, h // 4] for t in range(lens[b])], np.float64)
    s = keys @ q[b, h] / np.sqrt(128)
    p = np.exp(s - s.max())
    want = (p / p.sum()) @ vals
    got = case.reference["O"].reshape(3, 32, 128)[b, h]
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12)


def test_split_count_fills_the_machine_at_small_batch_only():
    v = STUDY.variant("02_split_kv")

    def split(B, L, sm=cfg.NOMINAL_SM_COUNT):
        return v.launches({"B": B, "L": L}, sm_count=sm)[0].grid[2]

    assert split(1, 65536) == 32 and split(64, 16384) == 1 and split(8, 16384) == 5
    assert split(2, 1600) == 4 and pd_.lengths(2, 1600)[1] < 3 * 400  # an empty last split
    assert split(1, 1024) == 2  # chunks of >= 512 tokens
    for s in STUDY.sizes:
        first, combine = v.launches(s, sm_count=cfg.NOMINAL_SM_COUNT)
        assert first.grid[:2] == (8, s["B"]) and 1 <= first.grid[2] <= 32
        assert combine.grid[0] == s["B"] * 32 and combine.block[0] == 128
        assert v.workspace_bytes(s) >= 256 + 4 * first.grid[2] * s["B"] * 32 * 130


ASYNC = {"04_async_ring", "05_mma_ring"}  # cache reads by cp.async copies, not loads


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return compile_variants(tmp_path_factory, "pd-cubins", STUDY.variants, ARCH, FLAGS)


@pytest.mark.parametrize("v", STUDY.variants, ids=lambda v: v.id)
def test_kernels_compile_without_spills_with_streaming_cache_loads(built, v):
    res = built[v.id]
    r = res.resources
    assert r.function == v.entry
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0 and r.stack_bytes == 0, res.log
    ops = set(res.sass)
    if v.id in ASYNC:  # 16-byte cp.async.cg copies into shared memory, read there
        assert "LDGSTS.E.BYPASS.128" in ops, sorted(ops)
        if v.id == "05_mma_ring":  # by ldmatrix (values transposed) into BF16 mmas
            assert {"LDSM.16.M88.4", "LDSM.16.MT88.4", "HMMA.16816.F32.BF16"} <= ops, sorted(ops)
        else:
            assert {"LDS.128", "LDS.64"} <= ops, sorted(ops)
        assert not any(op.startswith("LDG.") for op in ops if "EF" in op), sorted(ops)
    else:
        assert "LDG.E.EF.64" in ops, sorted(ops)  # 8 bytes a lane of each key and value, read once
    assert "SHFL.BFLY" in ops and "BAR.SYNC.DEFER_BLOCKING" in ops, sorted(ops)


# ------------------------------------------------------------------------------------------
# the CPU emulator

DRIVER = r"""
#include "emu.h"
#include KFILE
// argv: B L max_pages ws_bytes lens table q k v o guard_bytes, then per launch gx gy gz bx
int main(int argc, char** argv) {
  const int B = atoi(argv[1]), L = atoi(argv[2]), mp = atoi(argv[3]);
  const size_t ws_bytes = atol(argv[4]), guard = atol(argv[11]);
  size_t n;
  const int* lens = (const int*)emu_slurp(argv[5], &n);
  const int* table = (const int*)emu_slurp(argv[6], &n);
  const __nv_bfloat16* q = (const __nv_bfloat16*)emu_slurp(argv[7], &n);
  const __nv_bfloat16* k = (const __nv_bfloat16*)emu_slurp(argv[8], &n);
  const __nv_bfloat16* v = (const __nv_bfloat16*)emu_slurp(argv[9], &n);
  size_t no;
  char* o = emu_slurp(argv[10], &no);
  float* ws = (float*)aligned_alloc(256, (ws_bytes / 256 + 1) * 256);
  memset(ws, 0xA5, ws_bytes);  // garbage: a kernel must not rely on a zeroed workspace
  __nv_bfloat16* out = (__nv_bfloat16*)(o + guard);
  for (int i = 12, l = 0; i + 3 < argc; i += 4, ++l) {
    const dim3 grid{(unsigned)atoi(argv[i]), (unsigned)atoi(argv[i + 1]),
                    (unsigned)atoi(argv[i + 2])};
    const dim3 block{(unsigned)atoi(argv[i + 3]), 1, 1};
#ifdef KERNEL1
    if (l == 1) {
      emu_launch(grid, block, [=] { KERNEL1(B, L, mp, lens, table, q, k, v, out, ws); });
      continue;
    }
#endif
#ifdef WORKSPACE
    emu_launch(grid, block, [=] { KERNEL(B, L, mp, lens, table, q, k, v, out, ws); });
#else
    emu_launch(grid, block, [=] { KERNEL(B, L, mp, lens, table, q, k, v, out); });
#endif
  }
  std::ofstream(argv[10], std::ios::binary).write(o, no);
  return 0;
}
"""

# (B, L): one token; a batch of partial pages; mixed lengths whose shorter one ends before the
# last split (02 at 2 x 1600: 4 chunks of 400 tokens, sequence 1 has 1132: its last is empty)
EMULATED = [(1, 1), (3, 100), (2, 1600)]


@pytest.fixture(scope="module")
def emu_dir(tmp_path_factory):
    return emu_workdir(tmp_path_factory, "pd-emu", DRIVER)


def _emulate(emu_dir, v, B, L, launches=None):
    case = _case(B, L)
    exe = emu_build(emu_dir, v)
    sizes = {"B": B, "L": L}
    o = case.outputs["O"]
    files = {}
    for name, a in (
        *((n, case.inputs[n]) for n in ("lens", "table", "Q", "K", "V")),
        ("O", o.full),
    ):
        files[name] = emu_dir / f"{v.id}-{name}.bin"
        files[name].write_bytes(np.ascontiguousarray(a).tobytes())
    launches = launches or v.launches(sizes, sm_count=cfg.NOMINAL_SM_COUNT)
    args = [B, L, -(-L // 16), v.workspace_bytes(sizes) if v.workspace else 0]
    args += [files[n] for n in ("lens", "table", "Q", "K", "V", "O")] + [64 * 2]
    for la in launches:
        args += [*la.grid, la.block[0]]
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    o.full[:] = np.frombuffer(files["O"].read_bytes(), dtype=np.uint16)
    return case


@pytest.mark.parametrize("v", STUDY.variants, ids=lambda v: v.id)
def test_kernels_run_correctly_on_the_cpu_emulator(emu_dir, numpy_as_cupy, v):
    tol = PD.tolerance({}, "bfloat16")
    for B, L in EMULATED:
        case = _emulate(emu_dir, v, B, L)
        result = PD.check(case, tol, f"paged_decode/{v.id} at {B}x{L} (emulated)")
        assert result.rel_err < 4e-3, (v.id, B, L, result)


def test_the_emulated_check_fails_a_kernel_that_skips_sequences(emu_dir, numpy_as_cupy):
    v = STUDY.variant("01_block_per_group")
    (la,) = v.launches({"B": 4, "L": 40})
    short = cfg.Launch((la.grid[0], 2, 1), la.block, 0)
    case = _emulate(emu_dir, v, 4, 40, launches=[short])
    with pytest.raises(NonFinite, match="01_block_per_group at 4x40"):
        PD.check(case, 1e-2, "paged_decode/01_block_per_group at 4x40 (emulated)")


# ------------------------------------------------------------------------------------------
# on a GPU (marked gpu; skipped, visibly, where NVML finds none)

INFO, WHY = gpu.detect()
FAST = {"studies": ["paged_decode"], "timing": CHECK_TIMING}
GPU_SIZES = ["3x100", "1x4097", "8x1024", "64x4096"]


GPU_JOBS = [v.id for v in STUDY.variants]


@pytest.mark.parametrize("vid", GPU_JOBS)
@pytest.mark.gpu
@pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}")
def test_both_steps_correct_on_the_gpu_beside_sdpa(bench_batch, vid):
    df = bench_batch(FAST, "paged_decode", GPU_JOBS, GPU_SIZES, vid)
    assert len(df) == len(GPU_SIZES)
    for _, row in df.iterrows():
        assert_checked(row)
