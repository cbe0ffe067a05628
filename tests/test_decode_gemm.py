"""The decode_gemm study (y = x·Wᵀ at decode batch sizes, the hgemm problem): its config,
its kernels through the real nvcc for sm_90 (no spills, the loads each step is about), the
launch geometry at every size, and every kernel run on the CPU emulator (tests/cuda_emu.py)
at shapes that reach each path (scalar K, K splits, rows past N, M past the register batch
tile), checked by the hgemm problem's own check. The GPU tests at the end (marked gpu) run
every variant through the bench command at small and odd shapes, and the ladder's best
against 01 at the headline."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest
from conftest import (
    CHECK_TIMING,
    REPO,
    assert_checked,
    bench_rows,
    compile_variants,
    kernelbook_cli,
)
from cuda_emu import emu_build, emu_workdir

from kernelbook import config as cfg
from kernelbook import gpu, problems
from kernelbook.problems.base import NonFinite

ARCH = "sm_90"
FLAGS = ["-O3", "-lineinfo"]
PROJECT = cfg.load_project_file(
    REPO / "config" / "config.yaml", overrides={"studies": ["decode_gemm"]}
)
STUDY = PROJECT.study("decode_gemm")
VIDS = [v.id for v in STUDY.variants]
CUDA_VIDS = [v.id for v in STUDY.variants if v.kind == "cuda"]
# what nvcc builds and the emulator runs: the plain CUDA steps and every candidate of a tuned one
CUDA_BUILT = [v.id for v in STUDY.jobs() if v.kind == "cuda"]
RUN_CANDIDATES = [v.id for v in STUDY.candidates if v.tuned_from == "09_row_run"]
RING_CANDIDATES = [v.id for v in STUDY.candidates if v.tuned_from == "10_bulk_ring"]
BLOCK_CANDIDATES = [v.id for v in STUDY.candidates if v.tuned_from == "11_warp_blocks"]
# on the GPU: the plain CUDA steps and a candidate of each tuned step (a tuned variant is
# benched through its candidates): 09's shortest and longest runs, 10's fewest and most
# warps an SM
GPU_JOBS = [
    *[vid for vid in CUDA_VIDS if not STUDY.variant(vid).is_tuned],
    "05_triton__BLOCK_M16_BLOCK_N32_BLOCK_K256_NUM_WARPS4_NUM_STAGES4",
    "09_row_run__ROWS2_DEPTH8_WARPS4",
    "09_row_run__ROWS8_DEPTH8_WARPS8",
    "10_bulk_ring__WARPS4_SLOTS3_BLOCKS_SM2",
    "10_bulk_ring__WARPS8_SLOTS3_BLOCKS_SM2",
    "11_warp_blocks__WARPS1_UNR16",
]
MS = (1, 2, 4, 8, 16, 32)
LAYERS = ((4096, 4096), (14336, 4096), (4096, 14336), (28672, 4096), (128256, 4096))
HGEMM = problems.get("hgemm")


# ------------------------------------------------------------------------------------------
# the config


def test_study_loads_with_the_decode_sizes():
    assert STUDY.problem == "hgemm" and STUDY.dtype == "bfloat16" and STUDY.baseline == "cublas"
    want = [{"M": m, "N": n, "K": k} for n, k in LAYERS for m in MS]
    assert sorted(STUDY.sizes, key=str) == sorted(want, key=str)
    assert STUDY.headline == {"M": 1, "N": 14336, "K": 4096}
    assert STUDY.second_headline == {"M": 16, "N": 14336, "K": 4096}
    assert STUDY.headline in STUDY.profile_sizes and len(STUDY.profile_sizes) == 2
    assert STUDY.sanitize_sizes == ({"M": 3, "N": 37, "K": 1001},)
    # the stream and ring paths under the sanitizer too: K / 256 a multiple of 09's DEPTH, and
    # more slots a row than 10's ring holds, so that it wraps within a warp's one row
    (also,) = STUDY.sanitize_also
    for vid in ("09_row_run", "10_bulk_ring"):
        v = STUDY.variant(vid)
        assert STUDY.sanitize_sizes_for(v) == [STUDY.sanitize_sizes[0], also]
        for cid in v.candidates:
            d = STUDY.variant(cid).defines
            assert STUDY.sanitize_sizes_for(STUDY.variant(cid)) == [STUDY.sanitize_sizes[0], also]
            if vid == "09_row_run":
                assert also["K"] % 256 == 0 and (also["K"] // 256) % d["DEPTH"] == 0
            else:
                assert also["K"] % 2048 == 0 and also["K"] // 2048 > d["SLOTS"]
    assert VIDS == [
        "01_thread_per_output", "02_warp_per_row", "03_rows_per_warp", "04_split_k", "05_triton",
        "06_mma", "07_stream", "08_no_allocate", "09_row_run", "10_bulk_ring", "11_warp_blocks",
    ]  # fmt: skip
    assert VIDS[:4] + VIDS[5:] == CUDA_VIDS and STUDY.variant("05_triton").is_tuned
    # 09's run length, depth and block tuned at the two M = 1 layers past 8 K rows
    assert STUDY.variant("09_row_run").is_tuned
    assert [c.tune_point for c in STUDY.candidates if c.tuned_from == "09_row_run"] == [
        {"DEPTH": 8, "ROWS": r, "WARPS": w} for r in (2, 4, 8) for w in (4, 8)
    ]
    # 10's warps, slots and blocks an SM: rings of 96 to 192 KB an SM, 8 warps an SM or more
    ring = [c.tune_point for c in STUDY.candidates if c.tuned_from == "10_bulk_ring"]
    assert len(ring) == 4, ring
    for t in ring:
        assert 96 * 1024 <= t["WARPS"] * t["SLOTS"] * t["BLOCKS_SM"] * 4096 <= 192 * 1024, t
        assert t["WARPS"] * t["BLOCKS_SM"] >= 8, t
    # 11: 08's kernel (its source included whole), in blocks of one or two warps
    eleven = STUDY.variant("11_warp_blocks")
    assert eleven.entry == STUDY.variant("08_no_allocate").entry and eleven.is_tuned
    assert '#include "08_no_allocate.cu"' in (REPO / eleven.source).read_text()
    assert [c.tune_point for c in STUDY.candidates if c.tuned_from == "11_warp_blocks"] == [
        {"UNR": u, "WARPS": w} for w in (1, 2) for u in (8, 16)
    ]
    assert set(GPU_JOBS) <= {v.id for v in STUDY.jobs()}
    for v in STUDY.variants:
        ext = ".py" if v.kind == "triton" else ".cu"
        assert v.source == f"kernels/decode_gemm/{v.id}{ext}", v.id
        assert v.says and "pct_of_baseline" in v.predict, v.id
        assert v.id == VIDS[0] or v.claims, v.id  # every step after the floor claims
        assert not v.requires, f"{v.id}: every step handles every shape"
    # in the book's run: published on the H200, replayed where there is no GPU
    assert "decode_gemm" in cfg.read_yaml(REPO / "config" / "config.yaml")["studies"]


def test_a_read_bound_study_headlines_bandwidth_against_a_streaming_read(tmp_path):
    """The study overrides hgemm's figure of merit: GB/s, against the same bytes read (not
    copied) beside each variant; study.json carries both, and the key is refused, naming it,
    where the figure of merit is tflops."""
    import yaml

    from kernelbook.report import meta

    assert (STUDY.figure_of_merit, STUDY.bandwidth_reference) == ("gbps", "read")
    assert PROJECT.study("decode_gemm").figure_of_merit != HGEMM.figure_of_merit
    out = tmp_path / "study.json"
    meta.write_meta(STUDY, REPO, out)
    written = json.loads(out.read_text())
    assert (written["figure_of_merit"], written["bandwidth_reference"]) == ("gbps", "read")
    hgemm = cfg.load_project_file(REPO / "config" / "config.yaml").study("hgemm")
    assert (hgemm.figure_of_merit, hgemm.bandwidth_reference) == ("tflops", "copy")
    studies = tmp_path / "studies"
    shutil.copytree(REPO / "config" / "studies", studies)
    raw = yaml.safe_load((studies / "decode_gemm.yaml").read_text())
    raw.pop("figure_of_merit")
    (studies / "decode_gemm.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(cfg.ConfigError, match="decode_gemm.yaml: bandwidth_reference: read"):
        cfg.load_project_file(
            REPO / "config" / "config.yaml",
            overrides={"studies": ["decode_gemm"], "study_dir": str(studies)},
        ).study("decode_gemm")


def test_kernelbook_list_shows_the_study():
    proc = kernelbook_cli(REPO, "list", "decode_gemm", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "decode_gemm: hgemm bfloat16, baseline cublas, 30 sizes" in proc.stdout
    for vid in VIDS:
        assert vid in proc.stdout


def test_hgemm_cost_model_counts_w_at_decode_sizes():
    """At M = 1 min_bytes is W's N·K·2 bytes plus x and y: the gbps column is W's bandwidth."""
    s = {"M": 1, "N": 14336, "K": 4096}
    assert HGEMM.min_bytes(s, "bfloat16") == 2 * (4096 + 14336 * 4096 + 14336)
    assert HGEMM.flops(s) == 2 * 14336 * 4096
    assert HGEMM.tolerance(s, "bfloat16") == pytest.approx(1e-2)
    assert HGEMM.parse_size("1x14336x4096") == s


# ------------------------------------------------------------------------------------------
# launch geometry at every size


def _split(sizes, sm_count=cfg.NOMINAL_SM_COUNT) -> int:
    return STUDY.variant("04_split_k").launches(sizes, sm_count=sm_count)[0].grid[1]


def test_the_triton_step_compiles_to_tensor_core_code_for_every_candidate(tmp_path):
    """Each 05_triton candidate, compiled ahead of time without a GPU as its job does: no
    spills, the products on the tensor cores, and a program per BLOCK_N rows of W."""
    pytest.importorskip("triton")
    from kernelbook.build import triton as triton_build

    v = STUDY.variant("05_triton")
    cands = [c for c in STUDY.candidates if c.tuned_from == "05_triton"]
    assert len(cands) == 6, [c.id for c in cands]
    for c in cands:
        res = triton_build.compile_triton(
            c, ARCH, REPO, "bfloat16", "hgemm", tmp_path / c.id / "kernel.cubin", 600
        )
        r = res.resources
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, (c.id, res.log)
        assert any(op.startswith(("HMMA", "HGMMA")) for op in res.sass), (c.id, res.sass)
        s = STUDY.headline
        grid = c.launches(s, sm_count=cfg.NOMINAL_SM_COUNT)[0].grid
        assert grid[0] == -(-s["N"] // c.defines["BLOCK_N"]) and grid[1] == 1
    assert GPU_JOBS[-6] in v.candidates  # the GPU tests' candidate is one of them


@pytest.mark.parametrize("vid", [vid for vid in CUDA_BUILT if not STUDY.variant(vid).is_tuned])
def test_launch_geometry_covers_every_output(vid):
    v = STUDY.variant(vid)
    d = v.defines
    for s in STUDY.sizes:
        M, N, K = s["M"], s["N"], s["K"]
        launches = v.launches(s, sm_count=cfg.NOMINAL_SM_COUNT)
        L = launches[0]
        threads = L.block[0] * L.block[1] * L.block[2]
        assert threads % 32 == 0 and threads <= 1024
        if vid in RING_CANDIDATES:  # persistent; a ring of SLOTS 4 KB slots a warp
            assert L.grid == (cfg.NOMINAL_SM_COUNT * d["BLOCKS_SM"], 1, 1) and len(launches) == 1
            assert L.smem == d["WARPS"] * d["SLOTS"] * (4096 + 8) and threads == 32 * d["WARPS"]
            # BLOCKS_SM blocks fit an SM's 228 KB with the 1 KB the system keeps a block
            assert d["BLOCKS_SM"] * (L.smem + 1024) <= 228 * 1024, (vid, L)
            continue
        assert L.smem == 0
        if vid == "01_thread_per_output":
            assert L.grid[0] * L.block[0] >= N > (L.grid[0] - 1) * L.block[0]
            assert L.grid[1] == M
            continue
        rows = 16 if vid == "06_mma" else d["WARPS"] * d.get("ROWS", 1)  # rows of W a block
        assert threads == 32 * d["WARPS"]
        if vid == "07_stream":  # persistent: BLOCKS_SM blocks an SM, rows strided over warps
            full = cfg.NOMINAL_SM_COUNT * d["BLOCKS_SM"]
            assert L.grid[0] == min(-(-N // d["WARPS"]), full) and L.grid[1] == 1, (s, L)
            assert len(launches) == 1
            continue
        assert L.grid[0] * rows >= N > (L.grid[0] - 1) * rows, (vid, s, L)
        if vid != "04_split_k":
            assert len(launches) == 1 and L.grid[1] == 1
            continue
        S = L.grid[1]
        assert 1 <= S <= d["MAX_SPLIT"] and (S == 1 or K // S >= 1024), (s, S)
        assert v.workspace_bytes(s) >= 256 + 4 * S * M * N
        combine = launches[1]
        assert combine.grid[0] * combine.block[0] >= M * N > (combine.grid[0] - 1) * 256


def test_split_k_splits_the_short_n_shapes_only():
    assert _split({"M": 1, "N": 4096, "K": 14336}) == 4
    assert _split({"M": 32, "N": 4096, "K": 4096}) == 4
    for n, k in ((14336, 4096), (28672, 4096), (128256, 4096)):
        assert _split({"M": 1, "N": n, "K": k}) == 1
    # the device's SM count: more SMs want more warps, never past MAX_SPLIT or 1024 of K
    assert _split({"M": 1, "N": 4096, "K": 14336}, sm_count=264) == 7
    assert _split({"M": 1, "N": 4096, "K": 4096}, sm_count=264) == 4
    assert _split({"M": 1, "N": 4096, "K": 1000}) == 1


# ------------------------------------------------------------------------------------------
# nvcc: no spills, no local memory, the loads each step is about


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    variants = [STUDY.variant(vid) for vid in CUDA_BUILT]
    return compile_variants(tmp_path_factory, "decode-cubins", variants, ARCH, FLAGS)


@pytest.mark.parametrize("vid", CUDA_BUILT)
def test_kernels_compile_without_spills_with_their_loads(built, vid):
    res = built[vid]
    v = STUDY.variant(vid)
    r = res.resources
    assert r.function == v.entry
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0 and r.stack_bytes == 0, res.log
    ops = set(res.sass)
    assert not {op for op in ops if op.split(".")[0] in ("LDL", "STL")}, sorted(ops)
    wide = {op for op in ops if op.startswith("LDG") and ".128" in op}
    if vid == "01_thread_per_output":
        assert not wide and "SHFL.BFLY" not in ops  # 2-byte loads, no reduction
        assert any(op.startswith("LDG.E.U16") for op in ops)
    elif vid == "06_mma":  # 16-byte loads into the tensor cores, warps added in shared memory
        assert wide and "HMMA.16816.F32.BF16" in ops and "SHFL.BFLY" not in ops, sorted(ops)
    else:
        assert wide and "SHFL.BFLY" in ops, sorted(ops)  # 16-byte loads, shuffle reduction
    if vid in ("03_rows_per_warp", "04_split_k", "06_mma", "07_stream"):
        assert "LDG.E.EF.128" in ops, sorted(ops)  # W streamed (ld.global.cs: evict first)
    # W past L1 (.L1::no_allocate), x in it
    if vid == "08_no_allocate" or vid in RUN_CANDIDATES or vid in BLOCK_CANDIDATES:
        assert {"LDG.E.NA.128.CONSTANT", "LDG.E.128.CONSTANT"} <= ops, sorted(ops)
    threads = v.launch(STUDY.headline).block[0]
    assert 0 < r.registers <= 65536 // threads


# ------------------------------------------------------------------------------------------
# the CPU emulator: every kernel of a variant in order, on guarded buffers, checked by hgemm

DRIVER = r"""
#include "emu.h"
#include KFILE
// argv: M N K ws_bytes x.bin W.bin y.bin guard_bytes, then grid.x grid.y block.x a launch
int main(int argc, char** argv) {
  const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
  const size_t ws_bytes = atol(argv[4]), guard = atol(argv[8]);
  size_t nx, nw, ny;
  const __nv_bfloat16* x = (const __nv_bfloat16*)emu_slurp(argv[5], &nx);
  const __nv_bfloat16* W = (const __nv_bfloat16*)emu_slurp(argv[6], &nw);
  char* y = emu_slurp(argv[7], &ny);
  char* ws = (char*)aligned_alloc(256, (ws_bytes / 256 + 1) * 256);
  memset(ws, 0xA5, ws_bytes);  // garbage: a kernel must not rely on a zeroed workspace
  __nv_bfloat16* out = (__nv_bfloat16*)(y + guard);
  for (int i = 9, l = 0; i + 2 < argc; i += 3, ++l) {
    const dim3 grid{(unsigned)atoi(argv[i]), (unsigned)atoi(argv[i + 1]), 1};
    const dim3 block{(unsigned)atoi(argv[i + 2]), 1, 1};
#ifdef KERNEL1
    if (l == 1) {
      emu_launch(grid, block, [=] { KERNEL1(M, N, K, x, W, out, (float*)ws); });
      continue;
    }
#endif
#ifdef WORKSPACE
    emu_launch(grid, block, [=] { KERNEL(M, N, K, x, W, out, (float*)ws); });
#else
    emu_launch(grid, block, [=] { KERNEL(M, N, K, x, W, out); });
#endif
  }
  std::ofstream(argv[7], std::ios::binary).write(y, ny);
  return 0;
}
"""

# (M, N, K): K % 8 != 0 (scalar paths), N not a multiple of a block's rows, K / 8 not a
# multiple of 32 (a partial last vector step), K splits of 2 and 4 with a short last split
# (04), M past the 32-row register batch tile (03, 04), and every batch tile 1..32
EMULATED = [
    (1, 37, 1000),
    (3, 70, 1001),
    (16, 9, 264),
    (5, 100, 2056),
    (32, 33, 4104),
    (33, 5, 72),
    (2, 3, 8),
    (8, 40, 1032),
]
GUARD = 64


@pytest.fixture(scope="module")
def emu_dir(tmp_path_factory):
    return emu_workdir(tmp_path_factory, "decode-emu", DRIVER)


def _emu_exe(emu_dir, vid):
    return emu_build(emu_dir, STUDY.variant(vid))


def _emulate(emu_dir, vid, sizes, launches=None):
    """Run the variant's kernels on the emulator at ``sizes``; the hgemm Case holding y."""
    v = STUDY.variant(vid)
    exe = _emu_exe(emu_dir, vid)
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    rng = np.random.default_rng(M * 7919 + N * 31 + K)
    xf = rng.standard_normal((M, K)).astype(np.float32)
    wf = rng.standard_normal((N, K)).astype(np.float32)
    case = problems.get("hgemm").build_case(np, sizes, "bfloat16", 0, xf, wf, guard=GUARD)
    x, W, y = case.inputs["A"], case.inputs["B"], case.outputs["C"]
    for name, a in (("x", x), ("W", W), ("y", y.full)):
        (emu_dir / f"{vid}-{name}.bin").write_bytes(a.tobytes())
    launches = launches or v.launches(sizes, sm_count=cfg.NOMINAL_SM_COUNT)
    args = [M, N, K, v.workspace_bytes(sizes) if v.workspace else 0]
    args += [emu_dir / f"{vid}-{n}.bin" for n in ("x", "W", "y")] + [GUARD * 2]
    for L in launches:
        args += [L.grid[0], L.grid[1], L.block[0]]
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    y.full[:] = np.frombuffer((emu_dir / f"{vid}-y.bin").read_bytes(), dtype=np.uint16)
    return case


# 09's run path: K / 256 steps a row, a multiple of DEPTH 8 only (2048) or of both depths
# (4096, 8192), N no multiple of a block's rows, a last warp with fewer rows than ROWS, and
# M > 1 (the run streamed again a batch row)
RUN_SHAPES = [(1, 45, 2048), (3, 21, 4096), (2, 7, 8192)]


@pytest.mark.parametrize("vid", [vid for vid in CUDA_BUILT if not STUDY.variant(vid).is_tuned])
def test_kernels_run_correctly_on_the_cpu_emulator(emu_dir, numpy_as_cupy, vid):
    tol = HGEMM.tolerance({}, "bfloat16")
    splits = set()
    shapes = EMULATED + RUN_SHAPES if vid in RUN_CANDIDATES + RING_CANDIDATES else EMULATED
    for M, N, K in shapes:
        sizes = {"M": M, "N": N, "K": K}
        launches = None
        if vid in RING_CANDIDATES:  # 10 on 2 blocks: a warp's rows several, its ring reused
            (L,) = STUDY.variant(vid).launches(sizes, sm_count=cfg.NOMINAL_SM_COUNT)
            launches = [cfg.Launch((2, 1, 1), L.block, L.smem)]
        case = _emulate(emu_dir, vid, sizes, launches)
        result = HGEMM.check(case, tol, f"decode_gemm/{vid} at {M}x{N}x{K} (emulated)")
        # the only error left is y's rounding to bf16 (FP32 sums over K <= 4104)
        assert result.rel_err < 4e-3, (vid, sizes, result)
        if vid == "04_split_k":
            splits.add(_split(sizes))
    if vid == "04_split_k":
        assert {1, 2, 4} <= splits, splits  # the emulated shapes reach real splits


def test_the_emulated_check_fails_a_kernel_that_skips_rows(emu_dir, numpy_as_cupy):
    """02 launched on half the blocks it needs leaves rows of y at their NaN poison: the
    emulator run and the hgemm check catch it (so the test above can fail)."""
    v = STUDY.variant("02_warp_per_row")
    sizes = {"M": 2, "N": 64, "K": 256}
    (L,) = v.launches(sizes)
    short = cfg.Launch((L.grid[0] // 2, 1, 1), L.block, 0)
    case = _emulate(emu_dir, "02_warp_per_row", sizes, launches=[short])
    with pytest.raises(NonFinite, match="02_warp_per_row at 2x64x256"):
        HGEMM.check(case, 1e-2, "decode_gemm/02_warp_per_row at 2x64x256 (emulated)")


# ------------------------------------------------------------------------------------------
# on a GPU (marked gpu; skipped, visibly, where NVML finds none)

INFO, WHY = gpu.detect()
FAST = {"studies": ["decode_gemm"], "timing": {"min_time_s": 0.02, "max_time_s": 1}}
CHECK = {"studies": ["decode_gemm"], "timing": CHECK_TIMING}  # values, not times
# small; odd (K % 8 != 0: the scalar paths; N no multiple of a block's rows); M past the
# 32-row batch tile with a K that splits; the smallest study size
GPU_SIZES = ["4x256x512", "3x1001x1001", "33x4096x8200", "1x4096x4096"]


def _bench(tmp_path, variant, *sizes, settings=FAST):
    return bench_rows(tmp_path, settings, "decode_gemm", variant, sizes)


@pytest.mark.parametrize("vid", GPU_JOBS)
@pytest.mark.gpu
@pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}")
def test_every_variant_correct_on_the_gpu_at_small_and_odd_shapes(bench_batch, vid):
    df = bench_batch(CHECK, "decode_gemm", GPU_JOBS, GPU_SIZES, vid)
    assert len(df) == len(GPU_SIZES)
    for _, row in df.iterrows():
        assert_checked(row)


@pytest.mark.gpu
@pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}")
def test_the_ladder_s_best_is_at_least_as_fast_as_01_at_the_headline(bench_batch):
    label = HGEMM.label(STUDY.headline)
    medians = {
        vid: float(bench_batch(FAST, "decode_gemm", GPU_JOBS, [label], vid)["median_ms"].iloc[0])
        for vid in GPU_JOBS
    }
    best = min(GPU_JOBS[1:], key=medians.get)
    assert medians[best] <= medians[GPU_JOBS[0]], medians


@pytest.mark.gpu
@pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}")
def test_each_row_holds_its_bandwidth_against_a_streaming_read_of_the_same_bytes(tmp_path):
    """The same-bytes reference timed beside the variant is a read (copy_kind read): W's
    bytes over the read's time is a physical bandwidth, below the memory's theoretical peak,
    and no variant reads W faster than the read kernel by more than noise."""
    row = _bench(tmp_path, "03_rows_per_warp", HGEMM.label(STUDY.headline)).iloc[0]
    assert row["copy_kind"] == "read"
    facts = gpu.device_facts(INFO.uuids[0])
    peak = facts["mem_clock_max_mhz"] * 1e6 * facts["memory_bus_width_bits"] * 2 / 8 / 1e9
    assert 0.3 * peak < row["copy_gbps"] < peak, (row["copy_gbps"], peak)
    assert 0 < row["pct_of_copy"] < 110, row["pct_of_copy"]


def test_the_streaming_step_carries_its_pipeline_across_rows_on_the_emulator(
    emu_dir, numpy_as_cupy
):
    """07 on two blocks (8 warps), far fewer than the rows: each warp's load cursor runs from
    one row's end into its next row while the use cursor finishes the first, at K with a
    partial last step, a row count not a multiple of the warps, and M past its MT batch rows
    (W streamed again a pass); its grid is the persistent one, so this is what it does on a GPU."""
    import dataclasses

    tol = HGEMM.tolerance({}, "bfloat16")
    v = STUDY.variant("07_stream")
    for M, N, K in [(1, 61, 1032), (5, 37, 264), (2, 100, 4104), (1, 9, 8)]:
        sizes = {"M": M, "N": N, "K": K}
        (L,) = v.launches(sizes, sm_count=cfg.NOMINAL_SM_COUNT)
        few = dataclasses.replace(L, grid=(2, 1, 1))
        case = _emulate(emu_dir, "07_stream", sizes, launches=[few])
        result = HGEMM.check(case, tol, f"decode_gemm/07_stream at {M}x{N}x{K} on 2 blocks")
        assert result.rel_err < 4e-3, (sizes, result)


def test_the_ring_step_splits_rows_over_any_grid_on_the_emulator(emu_dir, numpy_as_cupy):
    """10's rows are split evenly over the grid's warps, whatever the grid: at its nominal
    grid (more warps than rows: most warps have none), on one block (each warp's ring wraps
    many times, through several rows and M's passes), and on 3 blocks (rows not a multiple of
    the warps). Each is what a GPU with that many SMs would run."""
    tol = HGEMM.tolerance({}, "bfloat16")
    vid = RING_CANDIDATES[0]
    for sizes, blocks in [
        ({"M": 1, "N": 45, "K": 2048}, None),
        ({"M": 3, "N": 29, "K": 4096}, 1),
        ({"M": 2, "N": 50, "K": 2048}, 3),
    ]:
        (L,) = STUDY.variant(vid).launches(sizes, sm_count=cfg.NOMINAL_SM_COUNT)
        launches = [L if blocks is None else cfg.Launch((blocks, 1, 1), L.block, L.smem)]
        case = _emulate(emu_dir, vid, sizes, launches)
        result = HGEMM.check(case, tol, f"decode_gemm/{vid} at {sizes} on {launches[0].grid}")
        assert result.rel_err < 4e-3, (sizes, blocks, result)
