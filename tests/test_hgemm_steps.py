"""The hgemm ladder's steps 01-05 without a GPU: each kernel (and each 05 autotuning
candidate) through the real nvcc for sm_90 with the defines of config/studies/
hgemm.steps-01-05.yaml, checked for zero spills and no local memory, a register count that
fits the blocks per SM it asks for, and the SASS instructions its header promises (FFMA only
for 01; HMMA for 02-05; LDSM for 03-05; LDGSTS for 05 only)."""

from __future__ import annotations

import itertools
import math
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, pairwise_picks
from cuda_emu import EMU

from kernelbook import config as cfg
from kernelbook.build import nvcc as build
from kernelbook.config import expr
from kernelbook.config.load import _resolve_defines as resolve_defines

ARCH = "sm_90"
FLAGS = ["-O3", "-lineinfo"]
STEPS = REPO / "config" / "studies" / "hgemm.yaml"
HEADLINE = {"M": 4096, "N": 4096, "K": 4096}
SMEM_OPTIN = 227 * 1024


def _variants() -> dict[str, cfg.Variant]:
    """The steps as Variants (05 as its tuning candidates), built the way the study loader
    builds them: defines resolved over each point, candidates filtered by the constraints."""
    out = {}
    for raw in [v for v in cfg.read_yaml(STEPS)["variants"] if v["id"][:2] <= "05"]:
        common = dict(
            study="hgemm",
            source=f"kernels/hgemm/{raw['id']}.cu",
            entry=raw["entry"],
            nvcc_flags=tuple(raw.get("nvcc_flags", [])),
            grid=tuple(raw["grid"]),
            block=tuple(raw["block"]),
            smem=raw.get("smem", 0),
            requires=tuple(raw.get("requires", [])),
            says=raw.get("says", ""),
            predict=dict(raw.get("predict", {})),
        )
        tune = raw.get("tune")
        if not tune:
            defines = resolve_defines(raw.get("defines", {}), {}, raw["id"])
            out[raw["id"]] = cfg.Variant(id=raw["id"], defines=defines, **common)
            continue
        space = tune["space"]
        for combo in itertools.product(*space.values()):
            point = dict(zip(space, combo, strict=True))
            defines = resolve_defines(raw.get("defines", {}), point, raw["id"])
            if all(expr.evaluate(c, defines) for c in tune["constraints"]):
                cid = raw["id"] + cfg.CANDIDATE_SEP + "_".join(f"{k}{v}" for k, v in point.items())
                out[cid] = cfg.Variant(
                    id=cid, defines=defines, tuned_from=raw["id"], tune_point=point, **common
                )
    return out


VARIANTS = _variants()


def _step(vid: str) -> str:
    return vid.split(cfg.CANDIDATE_SEP)[0]


def test_steps_config_is_complete():
    steps = [v for v in cfg.read_yaml(STEPS)["variants"] if v["id"][:2] <= "05"]
    assert [s["id"] for s in steps] == [
        "01_simt",
        "02_wmma",
        "03_mma_sync",
        "04_swizzle",
        "05_cp_async",
    ]
    for s in steps:
        assert (REPO / "kernels" / "hgemm" / f"{s['id']}.cu").is_file(), s["id"]
        assert s["says"] and "pct_of_baseline" in s["predict"], s["id"]
        assert "K % 8 == 0" in s["requires"], s["id"]
    # every 05 candidate launches at the headline size within the opt-in shared memory limit
    cands = [v for v in VARIANTS.values() if v.tuned_from == "05_cp_async"]
    assert len(cands) >= 8
    for v in cands:
        launch = v.launch(HEADLINE, smem_limit=SMEM_OPTIN)
        assert launch.smem == v.defines["STAGES"] * (v.defines["BM"] + v.defines["BN"]) * (
            v.defines["BK"] * 2
        )
        assert math.prod(launch.block) in (128, 256), v.id


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    out = tmp_path_factory.mktemp("hgemm-steps-cubins")

    def one(vid):
        v = VARIANTS[vid]
        return vid, build.compile_variant(v, ARCH, FLAGS, REPO, out / vid / "kernel.cubin")

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, VARIANTS))


# what each step's SASS must (and must not) contain, by opcode prefix
EXPECT = {
    "01_simt": ({"FFMA", "LDG.E.128"}, {"HMMA", "LDSM", "LDGSTS"}),
    "02_wmma": ({"HMMA.16816.F32.BF16", "LDG.E.128"}, {"LDGSTS"}),
    "03_mma_sync": ({"HMMA.16816.F32.BF16", "LDSM.16.M88.4", "STS.128"}, {"LDGSTS"}),
    "04_swizzle": ({"HMMA.16816.F32.BF16", "LDSM.16.M88.4", "STS.128"}, {"LDGSTS"}),
    "05_cp_async": (
        {"HMMA.16816.F32.BF16", "LDSM.16.M88.4", "LDGSTS.E.BYPASS.128", "LDGDEPBAR"},
        {"STS", "LDG.E"},
    ),
}


@pytest.mark.parametrize("vid", list(VARIANTS))
def test_hgemm_step_compiles_clean(built, vid):
    res = built[vid]
    r = res.resources
    v = VARIANTS[vid]
    assert r.function == v.entry
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, res.log
    assert r.stack_bytes == 0, res.log
    ops = set(res.sass)
    assert not any(op.startswith(("LDL", "STL")) for op in ops), sorted(ops)
    must, must_not = EXPECT[_step(vid)]
    for op in must:
        assert any(o == op or o.startswith(op + ".") for o in ops), (op, sorted(ops))
    for op in must_not:
        assert not any(o == op or o.startswith(op + ".") for o in ops), (op, sorted(ops))
    # the blocks per SM that __launch_bounds__ asks for fit the register file
    threads = math.prod(v.launch(HEADLINE).block)
    min_blocks = v.defines.get("MIN_BLOCKS", 2 if _step(vid) != "05_cp_async" else 1)
    allocated = -(-r.registers // 8) * 8
    assert min_blocks * threads * allocated <= 65536, (r.registers, threads, min_blocks)
    # and the static shared memory stays under 48 KiB (05: dynamic only)
    assert r.smem_static_bytes <= 48 * 1024
    if _step(vid) == "05_cp_async":
        assert r.smem_static_bytes == 0


def test_mma_steps_issue_the_same_mmas(built):
    """03 and 04 differ only in where a chunk lives: same HMMA and LDSM counts."""
    a, b = built["03_mma_sync"].sass, built["04_swizzle"].sass
    for op in ("HMMA.16816.F32.BF16", "LDSM.16.M88.4", "STS.128"):
        assert a[op] == b[op] > 0, op


def test_kernels_share_the_abi():
    """Every step's entry point has the study's signature."""
    for vid in ("01_simt", "02_wmma", "03_mma_sync", "04_swizzle", "05_cp_async"):
        text = (REPO / "kernels" / "hgemm" / f"{vid}.cu").read_text()
        entry = (
            VARIANTS[vid].entry
            if vid in VARIANTS
            else next(v.entry for v in VARIANTS.values() if v.tuned_from == vid)
        )
        sig = text[text.index(entry + "(") :].split(")")[0]
        assert "int M, int N, int K" in " ".join(sig.split()), vid
        assert "const __nv_bfloat16* __restrict__ A" in sig, vid
        assert "const __nv_bfloat16* __restrict__ B" in sig, vid
        assert "__nv_bfloat16* __restrict__ C" in sig, vid
        assert 'extern "C" __global__' in text, vid


def test_sources_exist():
    for v in VARIANTS.values():
        assert Path(REPO / v.source).is_file(), v.source


# ------------------------------------------------------------------------------------------
# The CPU emulator (tests/cuda_emu.py) extended with what these kernels use: BF16 types, the
# WMMA fragments (each lane holds the whole 16x16 tile), and the PTX helpers of 03-05
# (ldmatrix, mma.sync m16n8k16, cp.async) in their documented register layouts, exchanged
# between the lanes of a warp through the emulator's per-warp barriers. cp.async copies at
# once (commit/wait are no-ops). Every index, swizzle, guard and fragment mapping of the real
# source runs; the timing-dependent part of 05's ring (waits, barriers) is only as good as a
# synchronous copy shows it.

BF16_H = r"""
#pragma once
#include <cstring>
#include <cstdint>
struct __nv_bfloat16 { unsigned short x; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
struct float2 { float x, y; };  // uint2 is emu.h's
inline float __bfloat162float(__nv_bfloat16 h) {
  unsigned u = (unsigned)h.x << 16; float f; std::memcpy(&f, &u, 4); return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned u; std::memcpy(&u, &f, 4);
  return {(unsigned short)((u + 0x7fff + ((u >> 16) & 1)) >> 16)};
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
inline float2 __bfloat1622float2(__nv_bfloat162 h) {
  return {__bfloat162float(h.x), __bfloat162float(h.y)};
}
"""

HGEMM_EMU = r"""
#pragma once
#include "emu.h"
#include "cuda_bf16.h"
#include <algorithm>
using std::min;
inline int emu_lane() { return (threadIdx.x + threadIdx.y * blockDim.x) % 32; }
#include <atomic>
inline std::atomic<int> emu_ldsm_ways{0};  // worst LDSM phase: 16-byte accesses per bank group
inline std::vector<uint32_t> emu_x;  // per-warp exchange: 32 lanes x 8 words
inline uint32_t* emu_xw() { return &emu_x[(threadIdx.x + threadIdx.y * blockDim.x) / 32 * 256]; }
// 32-bit "shared addresses": offsets from an anchor in the same binary (wrapping arithmetic)
alignas(128) inline char emu_anchor;  // 128-aligned: offsets keep the bank groups
inline uint32_t smem_u32(const void* p) {
  return (uint32_t)((intptr_t)p - (intptr_t)&emu_anchor);
}
inline const char* emu_ptr(uint32_t a) { return &emu_anchor + (int32_t)a; }
inline void ldsm_x4(uint32_t& d0, uint32_t& d1, uint32_t& d2, uint32_t& d3, uint32_t addr) {
  uint32_t* x = emu_xw();
  const int l = emu_lane();
  x[l] = addr;
  __syncwarp();
  if (l == 0) {  // bank conflicts: the 8 row addresses of each 8x8 matrix are one phase
    int ways = 1;
    for (int i = 0; i < 4; ++i) {
      int count[8] = {};
      for (int j = 0; j < 8; ++j) ways = std::max(ways, ++count[(x[8 * i + j] / 16) % 8]);
    }
    int w = emu_ldsm_ways.load();
    while (w < ways && !emu_ldsm_ways.compare_exchange_weak(w, ways)) {}
  }
  uint32_t d[4];
  for (int i = 0; i < 4; ++i)  // matrix i: row l/4 from lane 8i + l/4, words (l%4)
    std::memcpy(&d[i], emu_ptr(x[8 * i + l / 4]) + (l % 4) * 4, 4);
  __syncwarp();
  d0 = d[0]; d1 = d[1]; d2 = d[2]; d3 = d[3];
}
inline void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  emu_mma_m16n8k16_bf16(*reinterpret_cast<float(*)[4]>(d), a[0], a[1], a[2], a[3], b0, b1);
}
inline void cp_async_16(uint32_t dst, const void* src, bool valid) {
  char* p = const_cast<char*>(emu_ptr(dst));
  if (valid) std::memcpy(p, src, 16); else std::memset(p, 0, 16);
}
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}
"""

MMA_H = r"""
#pragma once
#include "hgemm_emu.h"
namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {};
struct row_major {}; struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int m, int n, int k, class T, class L = void> struct fragment {
  float v[256];
};
template <class F> void fill_fragment(F& f, float x) { for (float& e : f.v) e = x; }
template <class T>
void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, row_major>& f, const T* p, unsigned ld) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.v[r * 16 + c] = __bfloat162float(p[r * ld + c]);
}
template <class T>
void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, col_major>& f, const T* p, unsigned ld) {
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 16; ++n) f.v[k * 16 + n] = __bfloat162float(p[n * ld + k]);
}
template <class FA, class FB, class FC>
void mma_sync(FC& d, const FA& a, const FB& b, const FC& c) {
  float out[256];
  for (int r = 0; r < 16; ++r) for (int n = 0; n < 16; ++n) {
    double s = 0;
    for (int k = 0; k < 16; ++k) s += (double)a.v[r * 16 + k] * b.v[k * 16 + n];
    out[r * 16 + n] = c.v[r * 16 + n] + (float)s;
  }
  std::memcpy(d.v, out, sizeof out);
}
template <class F> void store_matrix_sync(float* p, const F& f, unsigned ld, layout_t) {
  if (emu_lane() == 0)
    for (int r = 0; r < 16; ++r) for (int c = 0; c < 16; ++c) p[r * ld + c] = f.v[r * 16 + c];
}
}}  // namespace nvcuda::wmma
"""

EMU_DRIVER = r"""
#include "hgemm_emu.h"
#define KB_EMU 1
#include KFILE
#include <string>
// driver M N K gx gy bx A.bin B.bin C.bin guard: C.bin holds M*N + 2*guard BF16 (guards kept)
int main(int argc, char** argv) {
  const int M = std::stoi(argv[1]), N = std::stoi(argv[2]), K = std::stoi(argv[3]);
  const dim3 grid{(unsigned)std::stoi(argv[4]), (unsigned)std::stoi(argv[5]), 1};
  const dim3 block{(unsigned)std::stoi(argv[6]), 1, 1};
  const int guard = std::stoi(argv[10]);
  std::vector<__nv_bfloat16> A(M * K), B(N * K), C(M * N + 2 * guard);
  std::ifstream(argv[7], std::ios::binary).read((char*)A.data(), A.size() * 2);
  std::ifstream(argv[8], std::ios::binary).read((char*)B.data(), B.size() * 2);
  std::ifstream(argv[9], std::ios::binary).read((char*)C.data(), C.size() * 2);
  gridDim = grid;
  emu_x.assign((block.x + 31) / 32 * 256, 0);
  const __nv_bfloat16* a = A.data();
  const __nv_bfloat16* b = B.data();
  __nv_bfloat16* c = C.data() + guard;
  emu_launch(grid, block, [=] { KERNEL(M, N, K, a, b, c); });
  std::ofstream(argv[9], std::ios::binary).write((const char*)C.data(), C.size() * 2);
  std::printf("ldsm_ways %d\n", emu_ldsm_ways.load());
  return 0;
}
"""

# M x N x K: one partial tile, remainders in M and N against 128/256 tiles, K a multiple of 8
# but not of the K tile, and several K tiles (more than the 05 ring's stages)
EMU_SIZES = [(40, 24, 16), (130, 136, 72), (257, 131, 200)]
EMU_GUARD = 64


def _emu_picks() -> list[str]:
    plain = ["01_simt", "02_wmma", "03_mma_sync", "04_swizzle"]
    cands = [v for v in VARIANTS if v.startswith("05_cp_async" + cfg.CANDIDATE_SEP)]

    def factors(c):  # the index paths that differ: BK, warp tile, STAGES, tall tiles
        d = VARIANTS[c].defines
        return {"BK": d["BK"], "WN": d["WN"], "STAGES": d["STAGES"], "tall": d["BM"] > 128}

    return plain + pairwise_picks(cands, factors)


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> BF16 bits (round to nearest even), as uint16."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _f32(h: np.ndarray) -> np.ndarray:
    return (h.astype(np.uint32) << 16).view(np.float32)


@pytest.fixture(scope="module")
def hemu_dir(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    d = tmp_path_factory.mktemp("hgemm-emu")
    (d / "emu.h").write_text(EMU)
    (d / "cuda_bf16.h").write_text(BF16_H)
    (d / "hgemm_emu.h").write_text(HGEMM_EMU)
    (d / "mma.h").write_text(MMA_H)
    (d / "driver.cpp").write_text(EMU_DRIVER)
    return d


@pytest.mark.parametrize("vid", _emu_picks())
def test_hgemm_step_runs_correctly_on_the_cpu_emulator(hemu_dir, vid):
    v = VARIANTS[vid]
    exe = hemu_dir / vid
    cmd = ["g++", "-std=c++20", "-O1", "-pthread", "-w", f"-I{hemu_dir}"]
    cmd += [f'-DKFILE="{REPO / v.source}"', f"-DKERNEL={v.entry}"]
    cmd += [f"-D{k}={x}" for k, x in v.defines.items()]
    proc = subprocess.run(
        [*cmd, str(hemu_dir / "driver.cpp"), "-o", str(exe)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for M, N, K in EMU_SIZES:
        sizes = {"M": M, "N": N, "K": K}
        assert not v.unmet(sizes)
        rng = np.random.default_rng(M * 7919 + N * 31 + K)
        A = _bf16(rng.standard_normal((M, K)))
        B = _bf16(rng.standard_normal((N, K)))
        C0 = rng.integers(0, 2**16, M * N + 2 * EMU_GUARD, dtype=np.uint16)
        (hemu_dir / "A.bin").write_bytes(A.tobytes())
        (hemu_dir / "B.bin").write_bytes(B.tobytes())
        (hemu_dir / "C.bin").write_bytes(C0.tobytes())
        launch = v.launch(sizes)
        args = [M, N, K, *launch.grid[:2], launch.block[0]]
        args += [hemu_dir / "A.bin", hemu_dir / "B.bin", hemu_dir / "C.bin", EMU_GUARD]
        proc = subprocess.run(
            [str(exe), *map(str, args)], capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stderr
        ways = int(proc.stdout.split("ldsm_ways")[1])
        # 01/02 issue no LDSM; 03's plain 64-byte rows: 4 rows per bank group; 04/05: none
        assert ways == {"01_simt": 0, "02_wmma": 0, "03_mma_sync": 4}.get(_step(vid), 1), ways
        C = np.frombuffer((hemu_dir / "C.bin").read_bytes(), dtype=np.uint16)
        assert np.array_equal(C[:EMU_GUARD], C0[:EMU_GUARD]), f"{vid} at {sizes}: wrote before C"
        assert np.array_equal(C[-EMU_GUARD:], C0[-EMU_GUARD:]), f"{vid} at {sizes}: wrote past C"
        a, b = _f32(A).astype(np.float64), _f32(B).astype(np.float64)
        ref = a @ b.T
        got = _f32(C[EMU_GUARD:-EMU_GUARD]).astype(np.float64).reshape(M, N)
        tol = 2.0**-8 * np.abs(ref) + 2.0**-16 * (np.abs(a) @ np.abs(b).T)
        bad = ~(np.abs(got - ref) <= tol)
        assert not bad.any(), (
            f"{vid} at {sizes}: {int(bad.sum())} of {M * N} wrong, first at "
            f"{np.argwhere(bad)[0].tolist()}"
        )
