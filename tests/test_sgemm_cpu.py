"""The sgemm kernels without a GPU: every variant and autotuning candidate through the real
nvcc (resources the tune constraints promise), and the kernels without inline PTX run on the
CPU emulator (tests/cuda_emu.py) at shapes that reach every edge path, checked against a
float64 reference."""

from __future__ import annotations

import math
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, pairwise_picks
from cuda_emu import EMU, emu_build

from kernelbook import config as cfg
from kernelbook.build import loops
from kernelbook.build import nvcc as build

ARCH = "sm_90"
FLAGS = ["-O3", "-lineinfo"]


SGEMM = cfg.load_project_file(
    REPO / "config" / "config.yaml", overrides={"studies": ["sgemm"]}
).study("sgemm")
# the CUDA C ones (nvcc); the Triton step is compiled by tests/test_kinds.py
PLAIN = [v.id for v in SGEMM.variants if v.kind == "cuda"]
ALL_CANDIDATES = [c.id for c in SGEMM.candidates if c.kind == "cuda"]


def _candidate_sample() -> list[str]:
    """Of each CUDA tune space, candidates that show every pair of its define values
    (conftest.pairwise_picks). A GPU run compiles every candidate and its build table records
    their spills."""
    out = []
    for v in SGEMM.variants:
        if v.is_tuned and v.kind == "cuda":
            out += pairwise_picks(list(v.candidates), lambda c: SGEMM.variant(c).defines)
    return [c for c in ALL_CANDIDATES if c in out]


CANDIDATES = _candidate_sample()

# ------------------------------------------------------------------------------------------
# nvcc: what the config's constraints promise for each candidate (a sample that meets every
# pair of define values)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    out = tmp_path_factory.mktemp("sgemm-cubins")

    def one(vid):
        v = SGEMM.variant(vid)
        return vid, build.compile_variant(v, ARCH, FLAGS, REPO, out / vid / "kernel.cubin")

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, PLAIN + CANDIDATES))


def _static_smem(vid: str) -> int | None:
    """Static shared memory the source declares for this variant's defines (bytes), where
    this test knows it: 10 (one or two stages) and 12 (dynamic only)."""
    v = SGEMM.variant(vid)
    d = v.defines
    stem = Path(v.source).stem
    if stem == "10_warptiling":
        return (1 + d.get("PREFETCH", 0)) * (d["BM"] * d["BK"] + d["BK"] * d["BN"]) * 4
    if stem in ("16_async_b", "17_async_b_wide"):  # 10 built with ASYNC_B: two stages
        return 2 * (d["BM"] * d["BK"] + d["BK"] * d["BN"]) * 4
    if stem == "12_best":
        return 0  # dynamic: the config's smem expression
    return None


def _spill_budget(v) -> int:
    """Bytes of spills a candidate may have: none, but for 10's prefetching ones held to 128
    registers (MIN_BLOCKS 4), which trade a few spilled words (25 with ptxas 13.0) for 16
    warps an SM; the tune space measures that trade."""
    d = v.defines
    return 160 if d.get("PREFETCH") == 1 and d.get("MIN_BLOCKS") == 4 else 0


@pytest.mark.parametrize("vid", PLAIN + CANDIDATES)
def test_sgemm_compiles_without_spills(built, vid):
    res = built[vid]
    r = res.resources
    v = SGEMM.variant(vid)
    assert r.function == v.entry
    budget = _spill_budget(v)
    assert r.spill_store_bytes <= budget and r.spill_load_bytes <= budget, res.log
    assert r.stack_bytes <= budget
    ops = {op.split(".")[0] for op in res.sass}
    assert budget or not ops & {"LDL", "STL"}  # no local memory
    assert "FFMA" in ops
    size = SGEMM.headline
    threads = math.prod(v.launch(size).block)
    # the blocks per SM that __launch_bounds__ asks for fit the register file (allocated in
    # units of 8 registers a thread)
    min_blocks = v.defines.get("MIN_BLOCKS", 1)
    allocated = -(-r.registers // 8) * 8
    assert r.registers > 0 and min_blocks * threads * allocated <= 65536, (r.registers, threads)
    smem = _static_smem(vid)
    if smem is not None:
        assert r.smem_static_bytes == smem


def test_prefetch_has_fewer_barriers(tmp_path):
    """PREFETCH=1 has one __syncthreads a tile, PREFETCH=0 two: fewer BAR in the SASS (the
    tuned winner's tile built both ways)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    v = SGEMM.variant("10_warptiling")
    d = SGEMM.variant(v.candidates[0]).defines
    bars = {}
    for pf in (0, 1):
        cubin = _build_10(tmp_path / f"p{pf}.cubin", {**d, "PREFETCH": pf})
        sass = build.sass_of(cubin, 120, f"PREFETCH={pf}")[v.entry]
        bars[pf] = sum(n for op, n in sass.items() if op.startswith("BAR"))
    assert bars[1] < bars[0], bars


def _build_10(cubin: Path, defines: dict) -> Path:
    """10_warptiling's source built with ``defines`` into ``cubin`` (real nvcc)."""
    flags = [f"-D{k}={val}" for k, val in defines.items()]
    cmd = ["nvcc", f"-arch={ARCH}", "-cubin", *FLAGS, *flags, "-o", str(cubin)]
    source = REPO / SGEMM.variant("10_warptiling").source
    proc = subprocess.run([*cmd, str(source)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return cubin


def test_load_at_issues_the_next_tiles_loads_inside_the_tile(tmp_path):
    """LOAD_AT < BK: in the hot loop (the unguarded main loop) tile t+1's LDGs come before
    FFMAs of tile t, ahead of the barrier that ends it (the compiler did not sink them to
    their stores); LOAD_AT = BK (off): after that barrier, with no FFMA between an LDG and
    the next barrier."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    v = SGEMM.variant("10_warptiling")
    on = [c for c in v.candidates if SGEMM.variant(c).defines["LOAD_AT"] < 16]
    d = SGEMM.variant(on[0]).defines
    early = {}
    for at in (8, 16):
        cubin = _build_10(tmp_path / f"l{at}.cubin", {**d, "LOAD_AT": at})
        hot, _ = loops.hot_loop(build.sass_text(cubin, 120, f"LOAD_AT={at}"))
        ops = [loops.base(i.op) for i in hot.insns]
        assert ops.count("LDG") == 4 and ops.count("FFMA") == 1024  # 2 + 2 float4 a thread
        # after each LDG: does an FFMA come before the next BAR?
        early[at] = [
            "FFMA" in ops[k : ops.index("BAR", k) if "BAR" in ops[k:] else len(ops)]
            for k, op in enumerate(ops)
            if op == "LDG"
        ]
    assert all(early[8]) and not any(early[16]), early


# ------------------------------------------------------------------------------------------
# The CPU emulator: C = alpha * A @ B + beta * C on guarded buffers

DRIVER = r"""
#include "emu.h"
#include KFILE
// argv: M N K alpha beta grid.x grid.y block.x block.y A.bin B.bin C.bin guard_floats
int main(int argc, char** argv) {
  const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
  const float alpha = atof(argv[4]), beta = atof(argv[5]);
  const dim3 grid{(unsigned)atoi(argv[6]), (unsigned)atoi(argv[7]), 1};
  const dim3 block{(unsigned)atoi(argv[8]), (unsigned)atoi(argv[9]), 1};
  const size_t guard = atol(argv[13]);
  auto slurp = [](const char* path, size_t n) {
    float* p = (float*)aligned_alloc(256, (n * 4 / 256 + 1) * 256);
    std::ifstream(path, std::ios::binary).read((char*)p, n * 4);
    return p;
  };
  const float* A = slurp(argv[10], (size_t)M * K);
  const float* B = slurp(argv[11], (size_t)K * N);
  const size_t nc = (size_t)M * N + 2 * guard;
  float* C = slurp(argv[12], nc);
#ifdef WORKSPACE
  // argv[14]: the workspace's bytes, zeroed once (as the launcher does); the kernel runs twice
  // on it, each time on C as given: argv[12] gets the second run's C, argv[15] the first's,
  // argv[16] the workspace after both
  const size_t wbytes = atol(argv[14]);
  unsigned char* ws = (unsigned char*)calloc(wbytes, 1);
  float* C1 = (float*)malloc(nc * 4);
  memcpy(C1, C, nc * 4);
  emu_launch(grid, block, [=] { KERNEL(M, N, K, alpha, A, B, beta, C1 + guard, ws); });
  std::ofstream(argv[15], std::ios::binary).write((const char*)C1, nc * 4);
  emu_launch(grid, block, [=] { KERNEL(M, N, K, alpha, A, B, beta, C + guard, ws); });
  std::ofstream(argv[16], std::ios::binary).write((const char*)ws, wbytes);
#else
  emu_launch(grid, block, [=] { KERNEL(M, N, K, alpha, A, B, beta, C + guard); });
#endif
  std::ofstream(argv[12], std::ios::binary).write((const char*)C, nc * 4);
  return 0;
}
"""

# M x N x K: below one tile, remainders in M, N and K against every tile shape, several tiles
# (192, 260, 32): blocks inside the matrices (10's unguarded FULL path) beside edge blocks;
# (272, 264, 48) the same for 17's 256-row tiles
EMULATED = [
    (64, 64, 8), (130, 132, 68), (257, 260, 36), (33, 35, 17), (192, 260, 32), (272, 264, 48),
]  # fmt: skip
GUARD = 64


def _emulated_variants() -> list[str]:
    """Every plain variant without inline PTX (11 and 12 issue cp.async: GPU tests only),
    10's candidates (every pair of thread patch, LOAD_AT and raster; LOAD_AT's volatile loads
    are plain ones under the emulator), 16's (its
    cp.async through kernels/common/cp_async.cuh, a plain copy under the emulator) and 17's
    (16's loop with 128 results a lane: every pair of block tile, BK and patch)."""
    plain = [v for v in PLAIN if "asm" not in (REPO / SGEMM.variant(v).source).read_text()]

    def factors(c):
        d = SGEMM.variant(c).defines
        patch = (d["WM"], d["WN"], d["WNITER"], d["TM"], d["TN"])
        return {"patch": patch, "LOAD_AT": d["LOAD_AT"], "GROUP_M": d["GROUP_M"]}

    def factors16(c):
        d = SGEMM.variant(c).defines
        return {"BM": d["BM"], "w": d["WM"] * d["WN"] // 32, "G": d["GROUP_M"], "TM": d["TM"]}

    def factors17(c):
        d = SGEMM.variant(c).defines
        return {"tile": (d["BM"], d["BN"]), "BK": d["BK"], "patch": (d["WNITER"], d["TM"], d["TN"])}

    return (
        plain
        + pairwise_picks(SGEMM.variant("10_warptiling").candidates, factors)
        + pairwise_picks(SGEMM.variant("16_async_b").candidates, factors16)
        + pairwise_picks(SGEMM.variant("17_async_b_wide").candidates, factors17)
    )


@pytest.fixture(scope="module")
def emu_dir(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    d = tmp_path_factory.mktemp("sgemm-emu")
    (d / "emu.h").write_text(EMU)
    (d / "driver.cpp").write_text(DRIVER)
    return d


def _emulate(emu_dir, v, sizes, sm_count=None):
    """(C as the kernel left it, C0 as given, the float64 reference, and for a variant with
    a workspace the first of its two runs' C and the workspace after both)"""
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    alpha, beta = 1.25, 0.75
    rng = np.random.default_rng(M * 7919 + N * 31 + K)
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    C0 = rng.standard_normal(M * N + 2 * GUARD).astype(np.float32)
    (emu_dir / "A.bin").write_bytes(A.tobytes())
    (emu_dir / "B.bin").write_bytes(B.tobytes())
    (emu_dir / "C.bin").write_bytes(C0.tobytes())
    launch = v.launch(sizes, sm_count=sm_count)
    args = [M, N, K, alpha, beta, *launch.grid[:2], *launch.block[:2]]
    args += [emu_dir / "A.bin", emu_dir / "B.bin", emu_dir / "C.bin", GUARD]
    if v.workspace:
        args += [v.workspace_bytes(sizes), emu_dir / "C1.bin", emu_dir / "ws.bin"]
    proc = subprocess.run(
        [str(emu_build(emu_dir, v)), *map(str, args)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"{v.id} at {sizes}, grid {launch.grid}: {proc.stderr}"
    C = np.frombuffer((emu_dir / "C.bin").read_bytes(), dtype=np.float32)
    ref = alpha * (A.astype(np.float64) @ B.astype(np.float64))
    ref += beta * C0[GUARD:-GUARD].astype(np.float64).reshape(M, N)
    extra = None
    if v.workspace:
        C1 = np.frombuffer((emu_dir / "C1.bin").read_bytes(), dtype=np.float32)
        extra = (C1, np.frombuffer((emu_dir / "ws.bin").read_bytes(), dtype=np.uint8))
    return C, C0, ref, extra


def _check_c(vid, sizes, C, C0, ref):
    M, N = sizes["M"], sizes["N"]
    assert np.array_equal(C[:GUARD], C0[:GUARD]), f"{vid} at {sizes}: wrote before C"
    assert np.array_equal(C[-GUARD:], C0[-GUARD:]), f"{vid} at {sizes}: wrote past C"
    got = C[GUARD:-GUARD].reshape(M, N)
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert rel < 1e-5, f"{vid} at {sizes}: rel err {rel:.2e}"


@pytest.mark.parametrize("vid", _emulated_variants())
def test_sgemm_runs_correctly_on_the_cpu_emulator(emu_dir, vid):
    v = SGEMM.variant(vid)
    ran = 0
    for M, N, K in EMULATED:
        sizes = {"M": M, "N": N, "K": K}
        if v.unmet(sizes):
            continue
        C, C0, ref, _ = _emulate(emu_dir, v, sizes)
        _check_c(vid, sizes, C, C0, ref)
        ran += 1
    assert ran >= 2, f"{vid}: fewer than two emulated shapes meet its requires"


@pytest.mark.parametrize("sm_count", [1, 2, 3])
def test_stream_k_splits_tiles_across_blocks_and_leaves_its_flags_down(emu_dir, sm_count):
    """15_stream_k on a GPU of 1 to 3 SMs (4 to 12 stream-K blocks), so that its tiles are
    split over several blocks in every way: rows of whole tiles then a stream-K row, and all
    stream-K (fewer tiles than blocks). Each shape is right, the same bits on a second launch
    over the same workspace (the sums are added in a fixed order), and every flag is down
    after it (the next launch finds them as the first did). The emulator runs blocks in
    order and aborts where a block would wait on a flag no earlier block raised."""
    v = SGEMM.variant("15_stream_k")
    d = v.defines
    # (320, 640) is 25 tiles: on 12 blocks one left over, under a quarter wave, so the last
    # full wave is stream-K too; (256, 512) is 16: a multiple of 4 and 8 blocks; K = 160 and
    # 48 (multiples of BK) give tiles inside the matrices, the unguarded FULL loop
    shapes = [(257, 260, 36), (130, 132, 68), (64, 128, 160), (33, 35, 17), (400, 520, 40),
              (320, 640, 36), (256, 512, 20), (256, 512, 48)]  # fmt: skip
    kinds = set()
    for M, N, K in shapes:
        sizes = {"M": M, "N": N, "K": K}
        if v.unmet(sizes):
            continue
        grid = v.launch(sizes, sm_count=sm_count).grid
        tiles = -(-M // d["BM"]) * -(-N // d["BN"])
        sk_tiles = tiles - (grid[1] - 1) * grid[0]
        if grid[1] == 1:
            kinds.add("stream-K only")
        else:
            kinds.add("rows, then the rest" if sk_tiles < grid[0] else "rows, a wave and the rest")
        split = sk_tiles * -(-K // d["BK"]) % grid[0] != 0 or grid[0] > sk_tiles
        C, C0, ref, (C1, ws) = _emulate(emu_dir, v, sizes, sm_count)
        _check_c(v.id, sizes, C, C0, ref)
        assert np.array_equal(C, C1), f"{sizes}: a second launch gave other bits"
        flags = ws[d["MAX_SK"] * d["BM"] * d["BN"] * 4 :]
        assert not flags.any(), f"{sizes} (grid {grid}, split {split}): flags left up"
    if sm_count == 3:  # 12 blocks: 25 tiles leave 1, under a quarter wave
        assert kinds == {"rows, then the rest", "rows, a wave and the rest", "stream-K only"}
    assert {"rows, then the rest", "stream-K only"} <= kinds, kinds
