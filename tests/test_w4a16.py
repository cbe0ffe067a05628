"""The w4a16 study (y = x·Wᵀ with 4-bit weights and a bf16 scale per group of 128): the
problem's format, quantizer and cost model, the config's size rule, the kernels through the
real nvcc for sm_90 (no spills; the integer-to-float conversion where a step has it and not
where it does not), and every kernel run on the CPU emulator (tests/cuda_emu.py) at shapes
that reach each path (rows past N, M past a batch tile, one group and many), checked by the
problem's own check against its float64 reference. The GPU tests at the end (marked gpu) run
every variant and both baselines through the bench command at small and odd shapes."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from collections import Counter

import numpy as np
import pytest
from conftest import CHECK_TIMING, REPO, assert_checked, compile_variants
from cuda_emu import emu_build, emu_workdir

from kernelbook import config as cfg
from kernelbook import gpu, problems
from kernelbook.config import ConfigError
from kernelbook.problems import w4a16
from kernelbook.problems.base import Case, NonFinite, WrongResult
from kernelbook.problems.bf16 import bf16_bits, bf16_values

ARCH = "sm_90"
FLAGS = ["-O3", "-lineinfo"]
PROJECT = cfg.load_project_file(REPO / "config" / "config.yaml", overrides={"studies": ["w4a16"]})
STUDY = PROJECT.study("w4a16")
W4 = problems.get("w4a16")
# what nvcc builds: the plain steps and every candidate of the tuned one
BUILT = [v for v in STUDY.variants if not v.is_tuned] + list(STUDY.candidates)


# ------------------------------------------------------------------------------------------
# the format, the quantizer, the cost model


def test_nibble_order_and_zero_point():
    """Nibble j of word c is weight 8c + j, lowest bits first; w = (q - 8) * scale."""
    q = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 15, 14, 13, 12, 11, 10, 9, 8] * 8], dtype=np.uint32)
    words = np.zeros((1, 16), dtype=np.uint32)
    for j in range(8):
        words |= q.reshape(1, 16, 8)[:, :, j] << np.uint32(4 * j)
    assert words[0, 0] == 0x76543210 and words[0, 1] == 0x89ABCDEF
    S = bf16_bits(np, np.array([[0.5]], dtype=np.float32))
    w = w4a16.dequantized(np, words, S).reshape(-1)
    assert list(w[:16]) == [(int(v) - 8) * 0.5 for v in q[0, :16]]


def test_the_tiled_layout_puts_each_lanes_pieces_where_its_warp_reads_them():
    """tile_pack: for tile T and group gi, lane 4g + t's 16 bytes of rows 16T + g, then of
    rows 16T + 8 + g, are words 4 (4 gi + t) .. +3 of those rows; the group's scales of rows
    16T + g and 16T + 8 + g side by side in word g; rows past N zero."""
    rng = np.random.default_rng(5)
    N, K = 37, 384  # three tiles, the last with 5 rows; 3 groups
    Wq = rng.integers(0, 2**32, size=(N, K // 8), dtype=np.uint32)
    S = rng.integers(1, 2**16, size=(N, K // 128), dtype=np.uint16)
    Wt, St = w4a16.tile_pack(np, Wq, S)
    T, groups = 3, K // 128
    assert Wt.shape == (T * groups * 2 * 32 * 4,) and St.shape == (T * groups * 16,)
    Wt, St = Wt.reshape(T, groups, 2, 32, 4), St.reshape(T, groups, 8, 2)
    for tile in range(T):
        for gi in range(groups):
            for h in range(2):
                for lane in range(32):
                    row = 16 * tile + 8 * h + lane // 4
                    col = 4 * (4 * gi + lane % 4)
                    want = Wq[row, col : col + 4] if row < N else np.zeros(4, np.uint32)
                    assert (Wt[tile, gi, h, lane] == want).all(), (tile, gi, h, lane)
            for g in range(8):
                for h in range(2):
                    row = 16 * tile + 8 * h + g
                    assert St[tile, gi, g, h] == (S[row, gi] if row < N else 0)


def test_the_paired_layout_puts_consecutive_weights_in_nibbles_s_and_s_plus_4():
    """tile_pack(pairs=True): tiled, each word's nibble s the weight 2s and nibble s + 4 the
    weight 2s + 1, so that (w >> 4s) & 0x000F000F holds weights 2s and 2s + 1 of the word."""
    rng = np.random.default_rng(6)
    N, K = 21, 256
    Wq = rng.integers(0, 2**32, size=(N, K // 8), dtype=np.uint32)
    S = rng.integers(1, 2**16, size=(N, K // 128), dtype=np.uint16)
    plain, St = w4a16.tile_pack(np, Wq, S)
    paired, St2 = w4a16.tile_pack(np, Wq, S, pairs=True)
    assert (St == St2).all() and paired.shape == plain.shape
    for a, b in zip(plain[:300].tolist(), paired[:300].tolist(), strict=True):
        nib = [(a >> (4 * j)) & 15 for j in range(8)]
        for s in range(4):
            assert (b >> (4 * s)) & 15 == nib[2 * s] and (b >> (4 * s + 16)) & 15 == nib[2 * s + 1]


def test_quantizer_keeps_each_weight_within_half_a_step():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((7, 384)).astype(np.float32)
    w[2, 128:256] = 0.0  # a group of zeros: scale 1, every q = 8
    Wq, S = w4a16.quantize(np, w)
    assert Wq.shape == (7, 48) and Wq.dtype == np.uint32 and S.shape == (7, 3)
    s = bf16_values(np, S).astype(np.float64)
    deq = w4a16.dequantized(np, Wq, S).reshape(7, 384)
    err = np.abs(deq - w).reshape(7, 3, 128).max(axis=2)
    assert (err <= s * 0.5 * (1 + 2**-7) + 1e-7).all()  # bf16 scale rounding: a hair over
    assert s[2, 1] == 1.0 and (deq[2, 128:256] == 0).all()
    # the extremes of each group use the range: one nibble at 1 or 15 a group (|w| = 7 s)
    q = ((Wq[:, :, None] >> (np.arange(8, dtype=np.uint32) * 4)) & 15).reshape(7, 3, 128)
    assert ((q == 15) | (q == 1)).any(axis=2)[np.arange(7) != 2].all()
    with pytest.raises(ValueError, match="not a multiple of the group size 128"):
        w4a16.quantize(np, w[:, :200])


def test_cost_model_counts_the_nibbles_and_scales():
    s = {"M": 1, "N": 28672, "K": 4096}
    assert W4.min_bytes(s, "bfloat16") == 2 * 4096 + 28672 * 2048 + 2 * 28672 * 32 + 2 * 28672
    assert W4.flops(s) == 2 * 28672 * 4096
    assert W4.tolerance(s, "bfloat16") == pytest.approx(1e-2)
    assert W4.parse_size("1x28672x4096") == s


def test_k_off_the_group_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"size '1x64x1000': K = 1000 is not a multiple"):
        W4.parse_size("1x64x1000")
    raw = (REPO / "config" / "studies" / "w4a16.yaml").read_text()
    bad = raw.replace("size: {M: 5, N: 37, K: 1152}", "size: {M: 5, N: 37, K: 1150}")
    assert bad != raw
    root = tmp_path / "proj"
    shutil.copytree(REPO / "config", root / "config")
    (root / "config" / "studies" / "w4a16.yaml").write_text(bad)
    with pytest.raises(ConfigError, match=r"w4a16.*sanitize.size: 5x37x1150: K = 1150"):
        cfg.load_project_file(root / "config" / "config.yaml", overrides={"studies": ["w4a16"]})


def test_tinygemm_operands_dequantize_to_the_problems_weights():
    """The tinygemm_int4 baseline hands PyTorch's int4 kernel W as bytes of two nibbles (even
    k high) and scales with zero offsets as K/128 x N x 2: read back the way that kernel
    dequantizes ((q - 8) * scale + zero), they are the problem's weights exactly."""
    torch = pytest.importorskip("torch")
    N, K = 24, 384
    Wq, S = w4a16.quantize(np, np.random.default_rng(3).standard_normal((N, K)).astype(np.float32))
    q = (Wq[:, :, None] >> (np.arange(8, dtype=np.uint32) * 4)) & np.uint32(15)
    q = torch.from_numpy(q.reshape(N, K).astype(np.int32))
    scales = torch.from_numpy(S.view(np.int16)).view(torch.bfloat16)
    q8, sz = w4a16.tinygemm_operands(torch, q, scales)
    assert q8.dtype == torch.uint8 and q8.shape == (N, K // 2)
    assert sz.dtype == torch.bfloat16 and sz.shape == (K // 128, N, 2) and sz.is_contiguous()
    nibbles = torch.stack([q8 >> 4, q8 & 15], dim=2).reshape(N, K).double()
    scale, zero = (sz[:, :, i].t().double().repeat_interleave(128, dim=1) for i in (0, 1))
    w = (nibbles - 8) * scale + zero
    np.testing.assert_array_equal(w.numpy(), w4a16.dequantized(np, Wq, S).reshape(N, K))


def test_study_loads_with_both_baselines_and_the_read_roof():
    assert len(STUDY.sizes) == 30 and all(s["K"] % 128 == 0 for s in STUDY.sizes)
    assert STUDY.baseline == "dequant_matmul"
    assert STUDY.extra_baselines == ("cublas_bf16", "tinygemm_int4")
    assert STUDY.figure_of_merit == "gbps" and STUDY.bandwidth_reference == "read"
    assert STUDY.headline == {"M": 1, "N": 28672, "K": 4096}
    points = {}
    for c in STUDY.candidates:
        points.setdefault(c.tuned_from, []).append(c.tune_point)
    assert points == {
        "03_magic_dequant": [{"ROWS": r, "WARPS": w} for r in (2, 4) for w in (4, 8)],
        "09_offset_mma": [{"MIN_BLOCKS": b, "UNR": u, "WARPS": 4} for u in (2, 4) for b in (4, 5)],
        "10_ring_persistent": [{"STAGES": 3}, {"STAGES": 6}],
        "11_ring_lean": [{"STAGES": 3}, {"STAGES": 4}],
        "12_l2_prefetch": [{"AHEAD": a} for a in (0, 330, 660)],
        # 80 registers at UNR 2, 64 at UNR 1 (8 blocks an SM), 128 at UNR 4
        "13_tiled_w": [
            {"MIN_BLOCKS": b, "UNR": u, "WARPS": 4}
            for u, b in ((1, 6), (1, 8), (2, 5), (2, 6), (4, 4))
        ],
        "14_bulk_ring": [
            {"CWARPS": c, "UNRG": u} for c, u in ((8, 1), (8, 2), (11, 1), (11, 2), (19, 1))
        ],
        # 24 to 32 warps an SM; the next unit's loads early at 72 registers or more
        "15_even_units": [
            {"MIN_BLOCKS": b, "PREFETCH": p, "WARPS": w}
            for w, b, p in (
                (2, 12, 0),
                (2, 16, 0),
                (4, 6, 0),
                (4, 6, 1),
                (4, 7, 0),
                (4, 7, 1),
                (4, 8, 0),
                (8, 4, 0),
            )
        ],
        # the same warps an SM; PREFETCH fits 64 registers with the leaner group
        "16_even_lean": [
            {"MIN_BLOCKS": b, "PREFETCH": p, "WARPS": w}
            for w, b in ((2, 12), (2, 16), (4, 6), (4, 7), (4, 8), (8, 4))
            for p in (0, 1)
        ],
        # 32 warps an SM, or 24 with the next group's loads ahead; chunks of 2 to 8 groups
        "17_chunk_blocks": [
            {"CG": c, "MIN_BLOCKS": b, "PREFETCH": p, "WARPS": w}
            for w in (1, 2, 4)
            for b, p in ((24 // w, 1), (32 // w, 0))
            for c in (2, 4, 8)
        ],
        # 13's grid: 2, 4 or 8 warps a block, 32 an SM
        "18_tiled_lean": [{"MIN_BLOCKS": 32 // w, "WARPS": w} for w in (2, 4, 8)],
        "19_l2_ahead": [
            {"AHEAD": a, "MIN_BLOCKS": 32 // w, "WARPS": w} for w in (2, 4) for a in (1, 2, 3, 4)
        ],
        # 16 or 32 warps an SM; as many slots a warp as 228 KB an SM allows (16 warps of 3 slots
        # would have 18's 32 KB an SM in flight)
        "20_tiled_ring": [
            {"MIN_BLOCKS": b, "STAGES": st, "WARPS": w}
            for w, b, stages in (
                (1, 16, (4, 5, 8)),
                (1, 32, (3,)),
                (2, 8, (4, 5, 8)),
                (2, 16, (3, 4, 5)),
                (4, 4, (4, 5, 8)),
                (4, 8, (3, 4, 5)),
            )
            for st in stages
        ],
    }


TENSOR_CORE = (
    "w4_mma_dequant",
    "w4_mma_stream",
    "w4_mma_persistent",
    "w4_cp_async_ring",
    "w4_offset_mma",
    "w4_ring_persistent",
    "w4_ring_lean",
    "w4_tiled_w",
    "w4_bulk_ring",
    "w4_even_units",
    "w4_chunk_blocks",
    "w4_tiled_lean",
    "w4_tiled_ring",
)
RINGS = ("w4_ring_persistent", "w4_ring_lean")  # chunks of CG groups through a cp.async ring
# 07's grid: tiles shared out evenly
PERSISTENT = ("w4_mma_persistent", *RINGS)


@pytest.mark.parametrize("v", BUILT, ids=lambda v: v.id)
def test_launch_geometry_covers_every_row(v):
    # a block's rows of W: 16 (one m16 tile) for the tensor-core steps
    rows = 16 if v.entry in TENSOR_CORE else v.defines["WARPS"] * v.defines["ROWS"]
    for s in STUDY.sizes:
        (L,) = v.launches(s, sm_count=cfg.NOMINAL_SM_COUNT)
        if v.entry == "w4_mma_stream":  # K split over the block's warps where N is short
            ks = L.block[0] // 32
            assert 1 <= ks <= v.defines["MAX_KS"]
            assert ks == 1 or K_GROUPS_A_WARP * ks * 128 <= s["K"]
            assert L.smem == (2048 * ks if ks > 1 else 0)  # 4 tiles x 4 x 32 floats a warp
        elif v.entry == "w4_cp_async_ring":  # a ring of RING 1 KB slots a warp
            assert L.block == (32 * v.defines["WARPS"], 1, 1)
            assert L.smem == v.defines["WARPS"] * v.defines["RING"] * 1024
        elif v.entry == "w4_bulk_ring":  # a block's ring, partials and x sums; a copying warp
            d = v.defines
            assert L.block == (32 * (d["CWARPS"] + 1), 1, 1)
            ring = d["STAGES"] * (16 + d["CG"] * (1024 + 32))  # barriers, W and scales a slot
            sums = (d["STAGES"] + 1) * (d["CWARPS"] * 2 * 4 * 32 * 4 + 4)  # partials, counts
            assert L.smem == ring + sums + (s["K"] // 128) * 16 * 4
            assert L.smem <= 227 * 1024
            tiles = -(-s["N"] // 16)  # contiguous runs of tiles, one a block at least
            assert L.grid == (min(tiles, cfg.NOMINAL_SM_COUNT * d["BLOCKS_SM"]), 1, 1)
            continue
        elif v.entry == "w4_even_units":  # one run of units a warp, on the blocks that fit
            d, units = v.defines, -(-s["N"] // 16) * (s["K"] // 128)
            cap = min(d["MAX_WARPS"] // d["WARPS"], cfg.NOMINAL_SM_COUNT * d["MIN_BLOCKS"])
            # 16: -136 sum x for each group and 8 batch rows in shared memory
            lean = s["K"] // 128 * 32 if v.id.startswith("16_even_lean") else 0
            assert L.block == (32 * d["WARPS"], 1, 1) and L.smem == lean
            assert L.grid == (min(cap, -(-units // d["WARPS"])), 1, 1)
            # a counter a tile and two 16 x 8 slots a warp, for each pass of 8 batch rows
            ws = 4 * -(-s["M"] // 8) * (-(-s["N"] // 16) + d["MAX_WARPS"] * 2 * 128)
            assert v.workspace_bytes(s) == ws
            continue
        elif v.entry == "w4_chunk_blocks":  # a chunk of CG groups a warp, WARPS a block
            d, P = v.defines, -(-s["M"] // 8)
            tiles, cpt = -(-s["N"] // 16), -(-(s["K"] // 128) // d["CG"])
            assert L.block == (32 * d["WARPS"], 1, 1) and L.smem == 0
            assert L.grid == (-(-tiles * cpt // d["WARPS"]), 1, 1)
            # a count a tile and a 16 x 8 slot a chunk, for each pass
            assert v.workspace_bytes(s) == 4 * P * tiles * (1 + cpt * 128)
            continue
        elif v.entry == "w4_tiled_lean":  # 13's tiles; each warp's sums of x, 8 rows a group
            groups = -(-(s["K"] // 128) // v.defines["WARPS"])  # the most a warp takes
            assert L.block == (32 * v.defines["WARPS"], 1, 1)
            assert L.smem == v.defines["WARPS"] * groups * 8 * 4
        elif v.entry == "w4_tiled_ring":  # 18's, and each warp's ring: 1 KB of W, 128 B of scales
            d, groups = v.defines, -(-(s["K"] // 128) // v.defines["WARPS"])
            assert L.block == (32 * d["WARPS"], 1, 1)
            batch = 8 if s["M"] <= 8 else 16  # -136 sum x for the batch rows of a pass
            assert L.smem == d["WARPS"] * (d["STAGES"] * 1152 + groups * batch * 4)
            if s["K"] <= 4096:  # the blocks an SM asked for fit, 1 KB reserved each
                assert d["MIN_BLOCKS"] * (L.smem + 1024) <= 228 * 1024, (v.id, s)
        elif v.entry in RINGS:  # a ring of STAGES chunks of CG KB a warp
            d = v.defines
            assert L.block == (32 * d["WARPS"], 1, 1)
            assert L.smem == d["WARPS"] * d["STAGES"] * d["CG"] * 1024
            assert L.smem + 2 * d["WARPS"] * 2 * 4 * 32 * 4 <= 227 * 1024 // d["BLOCKS_SM"]
        else:
            assert L.block == (32 * v.defines["WARPS"], 1, 1) and L.smem == 0
        if v.entry in PERSISTENT:  # every block the same number of tiles, or one less
            cap = cfg.NOMINAL_SM_COUNT * v.defines["BLOCKS_SM"]
            tiles = -(-s["N"] // 16)
            per = -(-tiles // L.grid[0])  # the most tiles a block takes (b, b + grid, ...)
            assert L.grid[0] <= cap and per == -(-tiles // cap) and L.grid[1:] == (1, 1)
            assert tiles > (per - 1) * L.grid[0]  # every block has per - 1 tiles at least
            continue
        assert L.grid[0] * rows >= s["N"] > (L.grid[0] - 1) * rows and L.grid[1] == 1


K_GROUPS_A_WARP = 4  # 05 splits K no finer than 4 scale groups a warp


def test_the_streaming_step_splits_k_only_where_rows_are_few():
    v = STUDY.variant("05_mma_stream")
    split = {
        (s["N"], s["K"]): v.launches(s, sm_count=cfg.NOMINAL_SM_COUNT)[0].block[0] // 32
        for s in STUDY.sizes
    }
    assert split[(28672, 4096)] == split[(128256, 4096)] == 1  # a warp streams whole rows
    assert split[(14336, 4096)] == 2 and split[(4096, 4096)] == split[(4096, 14336)] == 7


# ------------------------------------------------------------------------------------------
# nvcc


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return compile_variants(tmp_path_factory, "w4-cubins", BUILT, ARCH, FLAGS)


@pytest.mark.parametrize("v", BUILT, ids=lambda v: v.id)
def test_kernels_compile_without_spills_and_convert_as_they_say(built, v):
    res = built[v.id]
    r = res.resources
    assert r.function == v.entry
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0 and r.stack_bytes == 0, res.log
    ops = set(res.sass)
    if v.entry in ("w4_cp_async_ring", *RINGS):  # W by cp.async.cg, then LDS.128
        assert {"LDGSTS.E.BYPASS.128", "LDS.128", "DEPBAR.LE"} <= ops, sorted(ops)
        assert not any(op.startswith("LDG.E") and op.endswith(".128") for op in ops), sorted(ops)
    elif v.entry == "w4_tiled_ring":  # W (cg, 16 bytes) and the scales (ca, 4) by cp.async
        want = {"LDGSTS.E.BYPASS.128", "LDGSTS.E", "LDS.128", "LDS", "DEPBAR.LE"}
        assert want <= ops, sorted(ops)
        assert "LDG.E.NA.128.CONSTANT" not in ops and "LDG.E.CONSTANT" not in ops, sorted(ops)
        assert "LDG.E.128.CONSTANT" in ops, sorted(ops)  # x alone by LDG
    elif v.entry == "w4_bulk_ring":  # W and the scales by the TMA unit (two copies a slot)
        assert {"UBLKCP.S.G", "LDS.128", "SYNCS.PHASECHK.TRANS64.TRYWAIT"} <= ops, sorted(ops)
        assert not any(op.startswith("LDG.E.NA") for op in ops), sorted(ops)  # x alone by LDG
    elif v.entry in (
        "w4_offset_mma",
        "w4_tiled_w",
        "w4_even_units",
        "w4_chunk_blocks",
        "w4_tiled_lean",
    ):
        assert "LDG.E.NA.128.CONSTANT" in ops, sorted(ops)  # W by L2 only
        # 12: the tiles' bulk L2 prefetches (09's source with W4_L2_PREFETCH); 09: none
        assert ("UBLKPF.L2" in ops) == v.id.startswith("12_"), (v.id, sorted(ops))
        # 19: L2 asked for W ahead, a lane's 16 bytes at a time (18's source with AHEAD)
        assert ("CCTL.E.PF2" in ops) == (v.defines.get("AHEAD", 0) > 0 and v.id[:2] == "19")
        if v.entry != "w4_offset_mma":  # a 32-bit load gives a lane both of its rows' scales
            assert "LDG.E.CONSTANT" in ops and "LDG.E.U16.CONSTANT" not in ops, sorted(ops)
    else:
        assert "LDG.E.EF.128" in ops, sorted(ops)  # W streamed: 16-byte ld.global.cs
    # (I2F.*.RP: the reciprocal of an integer division, as 14's runs of tiles a block)
    converts = {op for op in ops if op.startswith("I2F") and not op.endswith(".RP")}
    pieces = ("w4_even_units", "w4_chunk_blocks")
    lean = ("w4_chunk_blocks", "w4_tiled_lean", "w4_tiled_ring")
    if v.entry in ("w4_offset_mma", "w4_tiled_w", "w4_bulk_ring", *pieces, *lean, *RINGS):
        assert "HMMA.16816.F32.BF16" in ops and "HADD2.BF16_V2" not in ops, sorted(ops)
        assert not converts, sorted(ops)
        # the warps add through shared memory; 14's and 16's shuffles sum x, four lanes a group
        sums_x = v.entry in ("w4_bulk_ring", *lean) or v.id.startswith("16_")
        assert ("SHFL.BFLY" in ops) == sums_x, sorted(ops)
        if v.entry in pieces:  # 15, 17: pieces through the workspace, no block barrier
            # a release add (its MEMBAR, no L1 invalidation), the finisher's acquire fence
            # (which invalidates L1) and its L2 reads of the pieces
            want = {"ATOM.E.ADD.STRONG.GPU", "MEMBAR.ALL.GPU", "CCTL.IVALL", "LDG.E.STRONG.GPU"}
            assert want <= ops, sorted(ops)
            assert "MEMBAR.SC.GPU" not in ops
            # a block barrier only around 16's sums of x, once a pass (17's warps sum their own)
            assert ("BAR.SYNC.DEFER_BLOCKING" in ops) == v.id.startswith("16_"), sorted(ops)
    elif v.entry in TENSOR_CORE:  # tensor cores; nibble pairs by LOP3 and a bf16x2 add
        assert "HMMA.16816.F32.BF16" in ops and "HADD2.BF16_V2" in ops, sorted(ops)
        assert not converts and "SHFL.BFLY" not in ops, sorted(ops)  # warps add in smem
    else:
        assert "SHFL.BFLY" in ops
        if v.entry == "w4_magic_dequant":
            assert not converts, sorted(converts)  # the mantissa trick: no conversion left
        else:
            assert converts, sorted(ops)
    # __launch_bounds__: the blocks an SM the variant asks for, else 16 warps an SM; 14's
    # copying warp counts, and a block's warps go round the SM's 4 schedulers, whose register
    # files are a quarter each
    d = v.defines
    if v.entry == "w4_bulk_ring":
        per_scheduler = d["BLOCKS_SM"] * -(-(d["CWARPS"] + 1) // 4)
        assert 0 < r.registers <= 16384 // (per_scheduler * 32), (r.registers, per_scheduler)
        return
    warps = d["WARPS"] * d["BLOCKS_SM"] if "BLOCKS_SM" in d else 16
    assert 0 < r.registers <= 65536 // (warps * 32), (r.registers, warps)


def test_the_fused_lop3_step_halves_04s_lop3s_and_changes_nothing_else(built):
    """06 is 04 built with W4_FUSED_LOP3: each (q & 0x000F000F) | 0x43004300 one LOP3, not
    two; the same loads, shifts, bf16x2 subtractions, permutes and mmas."""
    before, after = built["04_mma_dequant"].sass, built["06_lop3_dequant"].sass
    assert after["LOP3.LUT"] <= 0.55 * before["LOP3.LUT"], (before["LOP3.LUT"], after["LOP3.LUT"])
    for op in ("HMMA.16816.F32.BF16", "HADD2.BF16_V2", "LDG.E.EF.128", "SHF.R.U32.HI"):
        assert after[op] == before[op], op


# ------------------------------------------------------------------------------------------
# the CPU emulator: every kernel on guarded buffers, checked by the problem's check

DRIVER = r"""
#include "emu.h"
#include KFILE
// argv: M N K x.bin Wq.bin S.bin y.bin guard_bytes grid.x block.x, and for a workspace variant
// workspace_bytes launches ws.bin: the kernel launched that many times on one workspace
// (zeroed once, as the launcher's), y poisoned again before each, the workspace left in ws.bin
int main(int argc, char** argv) {
  const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
  const size_t guard = atol(argv[8]);
  size_t nx, nw, ns, ny;
  const __nv_bfloat16* x = (const __nv_bfloat16*)emu_slurp(argv[4], &nx);
  const unsigned* Wq = (const unsigned*)emu_slurp(argv[5], &nw);
  const __nv_bfloat16* S = (const __nv_bfloat16*)emu_slurp(argv[6], &ns);
  char* y = emu_slurp(argv[7], &ny);
  __nv_bfloat16* out = (__nv_bfloat16*)(y + guard);
  const dim3 grid{(unsigned)atoi(argv[9]), 1, 1}, block{(unsigned)atoi(argv[10]), 1, 1};
#ifdef WORKSPACE
  const size_t ws_bytes = atol(argv[11]);
  unsigned char* ws = (unsigned char*)calloc(ws_bytes, 1);
  const std::vector<char> poisoned(y, y + ny);
  for (int i = 0; i < atoi(argv[12]); ++i) {
    std::memcpy(y, poisoned.data(), ny);
    emu_launch(grid, block, [=] { KERNEL(M, N, K, x, Wq, S, out, ws); });
  }
  std::ofstream(argv[13], std::ios::binary).write((const char*)ws, ws_bytes);
#else
  emu_launch(grid, block, [=] { KERNEL(M, N, K, x, Wq, S, out); });
#endif
  std::ofstream(argv[7], std::ios::binary).write(y, ny);
  // the L2 prefetches, as "array offset bytes" lines (offsets in bytes from the array's start)
  for (auto [p, bytes] : emu_prefetches) {
    const char* c = (const char*)p;
    const char *w = (const char*)Wq, *s = (const char*)S;
    if (c >= w && c < w + nw) printf("Wq %zu %u\n", (size_t)(c - w), bytes);
    else if (c >= s && c < s + ns) printf("S %zu %u\n", (size_t)(c - s), bytes);
    else printf("elsewhere 0 %u\n", bytes);
  }
  return 0;
}
"""

# (M, N, K): one group and many; N not a multiple of a block's rows (rows past N); M at
# every batch tile (1, 2, 4, 8) and past the largest (5, 16, 33: chunks of the tile)
EMULATED = [(1, 37, 128), (2, 70, 256), (3, 9, 1152), (5, 33, 512), (8, 16, 384), (16, 5, 128)]
EMULATED += [(33, 3, 128)]
GUARD = 64


@pytest.fixture(scope="module")
def emu_dir(tmp_path_factory):
    return emu_workdir(tmp_path_factory, "w4-emu", DRIVER)


def _case(sizes) -> Case:
    """The problem's inputs at ``sizes`` made with NumPy through its own quantizer, and its
    float64 reference (what setup builds with CuPy on a GPU)."""
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    rng = np.random.default_rng(M * 7919 + N * 31 + K)
    xf = rng.standard_normal((M, K)).astype(np.float32)
    wf = rng.standard_normal((N, K)).astype(np.float32)
    return W4.build_case(np, sizes, "bfloat16", 0, xf, wf, guard=GUARD)


def _emulate(emu_dir, v, sizes, grid=None, case=None, printed=None, name=None, launches=2):
    """``v`` run by the emulator at ``sizes`` (on ``grid`` blocks, default its own); what the
    driver printed (the L2 prefetches) appended to ``printed``; ``name``: the executable's,
    for a variant built with other defines than its own. A workspace variant is launched
    ``launches`` times on one workspace, y poisoned before each (what the last one wrote is
    checked), and the workspace it leaves is the case's ``emu_workspace`` (bytes)."""
    exe = emu_build(emu_dir, v, name)
    case = case or _case(sizes)
    y = case.outputs["y"]
    files = {n: emu_dir / f"{v.id}-{n}.bin" for n in ("x", "Wq", "S", "y")}
    given = dict(case.inputs)
    if v.computes in ("tiled", "tiled_pairs"):  # W and S in the problem's tiled layout
        pairs = v.computes == "tiled_pairs"
        given["Wq"], given["S"] = w4a16.tile_pack(np, case.inputs["Wq"], case.inputs["S"], pairs)
    for n in ("x", "Wq", "S"):
        files[n].write_bytes(given[n].tobytes())
    files["y"].write_bytes(y.full.tobytes())
    (L,) = v.launches(sizes, sm_count=cfg.NOMINAL_SM_COUNT)
    args = [sizes["M"], sizes["N"], sizes["K"], *files.values(), GUARD * 2]
    args += [grid or L.grid[0], L.block[0]]
    if v.workspace:
        ws = emu_dir / f"{v.id}-ws.bin"
        args += [v.workspace_bytes(sizes), launches, ws]
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    y.full[:] = np.frombuffer(files["y"].read_bytes(), dtype=np.uint16)
    if v.workspace:
        case.emu_workspace = ws.read_bytes()
    if printed is not None:
        printed.append(proc.stdout)
    return case


@pytest.mark.parametrize("v", BUILT, ids=lambda v: v.id)
def test_kernels_run_correctly_on_the_cpu_emulator(emu_dir, numpy_as_cupy, v):
    tol = W4.tolerance({}, "bfloat16")
    for M, N, K in EMULATED:
        sizes = {"M": M, "N": N, "K": K}
        case = _emulate(emu_dir, v, sizes)
        result = W4.check(case, tol, f"w4a16/{v.id} at {M}x{N}x{K} (emulated)")
        # what is left is y's rounding to bf16 and FP32 sums (the weights are exact)
        assert result.rel_err < 4e-3, (v.id, sizes, result)


def test_the_persistent_step_shares_the_tiles_out_evenly():
    """07's grid at the study's M = 1 shapes on an H200 (132 SMs, 4 blocks each): as many
    tiles on every block, so no block streams on alone at the end."""
    v = STUDY.variant("07_mma_persistent")
    grids = {
        n: v.launches({"M": 1, "N": n, "K": 4096}, sm_count=132)[0].grid[0]
        for n in (4096, 14336, 28672, 128256)
    }
    assert grids == {4096: 256, 14336: 448, 28672: 448, 128256: 501}
    assert all((n // 16) % g == 0 for n, g in grids.items())  # 1, 2, 4 and 16 tiles a block


@pytest.mark.parametrize(
    "vid", ["07_mma_persistent", "10_ring_persistent", "11_ring_lean", "14_bulk_ring"]
)
def test_the_persistent_step_streams_several_tiles_a_block(emu_dir, numpy_as_cupy, vid):
    """07, 10 and 11 on fewer blocks than tiles (the study's shapes give a block 3 to 61 tiles on an
    H200, the emulated ones only one): each block's stream runs across tiles, groups or chunks
    a warp left idle in a tile (K / 128 not a multiple of the warps) and 10's and 11's half
    chunk (an odd number of groups, 11's predicated copy) included, at every batch tile."""
    v = STUDY.variant(vid)
    tol = W4.tolerance({}, "bfloat16")
    for (M, N, K), grid in [((1, 70, 256), 2), ((3, 100, 1152), 3), ((16, 37, 128), 1)]:
        sizes = {"M": M, "N": N, "K": K}
        case = _emulate(emu_dir, v, sizes, grid=grid)
        result = W4.check(case, tol, f"w4a16/{v.id} at {M}x{N}x{K} on {grid} blocks (emulated)")
        assert result.rel_err < 4e-3, (sizes, grid, result)
    sizes = {"M": 33, "N": 40, "K": 384}  # two passes over W (batch rows 0-31, then 32)
    case = _emulate(emu_dir, v, sizes, grid=2)
    assert W4.check(case, tol, f"w4a16/{vid} at 33x40x384 (emulated)").rel_err < 4e-3


EVEN_CUTS = [
    ((1, 100, 1152), 1),  # 4 warps, 63 units: runs of 16, 16, 16, 15, whole tiles and pieces
    ((2, 100, 1152), 2),  # 8 warps: runs of 8 and 7, every tile cut once or twice
    ((3, 9, 1152), 3),  # 12 warps for 9 units: 3 warps without a unit, one tile in 9 pieces
    ((12, 37, 256), 5),  # two passes of 8 batch rows; 20 warps for 6 units
    ((33, 40, 384), 2),  # five passes, the last of one batch row
]


@pytest.mark.parametrize("step", ["15_even_units", "16_even_lean"])
@pytest.mark.parametrize("prefetch", [0, 1])
@pytest.mark.parametrize("sizes, grid", EVEN_CUTS, ids=lambda p: str(p))
def test_the_even_step_adds_the_tiles_it_cuts_and_leaves_its_counters_at_zero(
    emu_dir, numpy_as_cupy, sizes, grid, prefetch, step
):
    """15's runs of units (16's too) cut tiles between warps (and leave some warps without
    a unit): two launches on one workspace both write every y (the second is checked), and
    every tile's counter is 0 again after them, each pass's as the next launch needs; with
    and without the next unit's loads ahead."""
    (v,) = [
        c
        for c in STUDY.candidates
        if c.tuned_from == step
        and c.tune_point == {"MIN_BLOCKS": 7, "PREFETCH": prefetch, "WARPS": 4}
    ]
    M, N, K = sizes
    case = _emulate(emu_dir, v, {"M": M, "N": N, "K": K}, grid=grid, launches=2)
    tol = W4.tolerance({}, "bfloat16")
    where = f"w4a16/{v.id} at {M}x{N}x{K} on {grid} blocks (emulated)"
    assert W4.check(case, tol, where).rel_err < 4e-3
    ws = np.frombuffer(case.emu_workspace, dtype=np.uint32)
    tiles, region = -(-N // 16), -(-N // 16) + v.defines["MAX_WARPS"] * 2 * 128
    assert ws.size == -(-M // 8) * region
    counters = ws.reshape(-1, region)[:, :tiles]
    assert not counters.any(), counters
    # the pieces were there: a slot of the first pass holds a partial sum (not 0, not NaN)
    slots = ws.reshape(-1, region)[0, tiles:].view(np.float32)
    assert np.isfinite(slots).all() and slots.any()


def test_the_lean_step_runs_half_15s_mmas_and_no_permutes_in_its_hot_loop(tmp_path):
    """16 is 15's source built with EVEN_LEAN: in the hot loop a group is 8 HMMAs, not 16
    (no zero-point chain), no PRMT (x's words are the B fragment as they lie) and no
    predicated load of x (a lane past M reads row M - 1), under 75 % of 15's instructions."""
    from kernelbook.build import loops
    from kernelbook.build import nvcc as build

    hot = {}
    for step in ("15_even_units", "16_even_lean", "17_chunk_blocks"):
        point = (
            "WARPS4_MIN_BLOCKS8_CG4_PREFETCH0"
            if step[:2] == "17"
            else "WARPS4_MIN_BLOCKS8_PREFETCH0"
        )
        v = STUDY.variant(f"{step}__{point}")
        cubin = tmp_path / f"{step}.cubin"
        build.compile_variant(v, ARCH, FLAGS, REPO, cubin)
        dump = subprocess.run(
            [build.tool("cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True
        )
        hot[step], _ = loops.hot_loop(dump.stdout)
    ops = {k: Counter(loops.base(i.op) for i in lp.insns) for k, lp in hot.items()}
    x_loads = {  # x through L1: LDG.E.128.CONSTANT (W: .NA, through L2 only)
        k: [i for i in lp.insns if i.op == "LDG.E.128.CONSTANT"] for k, lp in hot.items()
    }
    assert (ops["15_even_units"]["HMMA"], ops["16_even_lean"]["HMMA"]) == (16, 8)
    assert (ops["15_even_units"]["PRMT"], ops["16_even_lean"]["PRMT"]) == (16, 0)
    assert len(x_loads["15_even_units"]) == len(x_loads["16_even_lean"]) == 4
    assert all(i.predicated for i in x_loads["15_even_units"])
    assert not any(i.predicated for i in x_loads["16_even_lean"])
    assert len(hot["16_even_lean"].insns) < 0.75 * len(hot["15_even_units"].insns)
    # 17 walks a chunk's groups as 16 walks a run's: the same group, its sums of x from the
    # warp's own (109 instructions against 103 with ptxas 13.0)
    assert ops["17_chunk_blocks"]["HMMA"] == 8 and ops["17_chunk_blocks"]["PRMT"] == 0
    assert len(hot["17_chunk_blocks"].insns) <= len(hot["16_even_lean"].insns) + 8


CHUNKS = [
    (1, 100, 1152),  # 9 groups a tile: 7 tiles of chunks of 2, 4 or 8 groups and a short one
    (3, 9, 1152),  # one tile, its chunks in warps of several blocks
    (12, 37, 256),  # two passes of 8 batch rows, each its own pieces and counts
    (33, 40, 384),  # five passes, the last of one batch row
    (5, 48, 256),  # at CG 2 or more a chunk is the whole tile: y stored directly, no piece
]


@pytest.mark.parametrize("point", [(1, 32, 0, 2), (2, 12, 1, 4), (4, 8, 0, 8)], ids=str)
@pytest.mark.parametrize("sizes", CHUNKS, ids=str)
def test_the_chunk_step_adds_every_chunk_once_and_leaves_its_counts_at_zero(
    emu_dir, numpy_as_cupy, sizes, point
):
    """17's chunks of CG groups, a warp each: two launches on one workspace both write every
    y (the second is checked); after them every tile's count is 0 again, as the next launch
    needs; a tile of one chunk leaves no piece, else the slots hold pieces."""
    w, b, pf, cg = point
    want = {"CG": cg, "MIN_BLOCKS": b, "PREFETCH": pf, "WARPS": w}
    (v,) = [
        c for c in STUDY.candidates if c.tuned_from == "17_chunk_blocks" and c.tune_point == want
    ]
    M, N, K = sizes
    case = _emulate(emu_dir, v, {"M": M, "N": N, "K": K}, launches=2)
    tol = W4.tolerance({}, "bfloat16")
    where = f"w4a16/{v.id} at {M}x{N}x{K} (emulated)"
    assert W4.check(case, tol, where).rel_err < 4e-3
    ws = np.frombuffer(case.emu_workspace, dtype=np.uint32)
    passes, tiles, cpt = -(-M // 8), -(-N // 16), -(-(K // 128) // cg)
    assert ws.size == passes * tiles * (1 + cpt * 128)
    assert not ws[: passes * tiles].any(), ws[: passes * tiles]
    slots = ws[passes * tiles :].view(np.float32)
    assert np.isfinite(slots).all() and slots.any() == (cpt > 1)


def _prefetched(printed: str) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for line in printed.splitlines():
        array, offset, nbytes = line.split()
        out.setdefault(array, []).append((int(offset), int(nbytes)))
    return {a: sorted(r) for a, r in out.items()}


def test_the_prefetch_step_asks_l2_for_every_tile_once_inside_w_and_s(emu_dir, numpy_as_cupy):
    """12's L2 prefetches (kept by the emulator, where they move nothing) at AHEAD = 0 (each
    block its own tile), 2 and 7 (a later block's, the first AHEAD blocks' their own too, on
    grids both longer and shorter than AHEAD): every tile's rows of W and of the scales asked
    for exactly once, 16-byte aligned, a multiple of 16 bytes long (a ragged tile's scales
    rounded down), nothing outside the two arrays; and the products still 09's."""
    base = next(c for c in STUDY.candidates if c.tuned_from == "12_l2_prefetch")
    tol = W4.tolerance({}, "bfloat16")
    for ahead in (0, 2, 7):
        v = dataclasses.replace(base, defines={**base.defines, "AHEAD": ahead})
        for M, N, K in [(1, 37, 128), (3, 100, 1152), (2, 64, 256)]:
            sizes = {"M": M, "N": N, "K": K}
            printed: list[str] = []
            case = _emulate(emu_dir, v, sizes, printed=printed, name=f"12-ahead{ahead}")
            assert W4.check(case, tol, f"w4a16/12 at {M}x{N}x{K}").rel_err < 4e-3
            got = _prefetched(printed[0])
            assert set(got) <= {"Wq", "S"}, got  # nothing elsewhere
            tiles = -(-N // 16)
            rows = [min(16, N - 16 * t) for t in range(tiles)]
            want_w = [(16 * t * K // 2, r * K // 2) for t, r in enumerate(rows)]
            want_s = [(16 * t * K // 64, r * K // 64 // 16 * 16) for t, r in enumerate(rows)]
            assert got["Wq"] == want_w, (ahead, sizes)
            assert got.get("S", []) == [w for w in want_s if w[1]], (ahead, sizes)
            for array, n in (("Wq", N * K // 2), ("S", N * K // 64)):
                for off, nbytes in got.get(array, []):
                    assert off % 16 == 0 and nbytes % 16 == 0 and off + nbytes <= n


@pytest.mark.parametrize("warps, ahead", [(2, 1), (4, 2), (4, 4)])
def test_the_ahead_step_asks_l2_once_for_every_group_a_warp_loads_after_its_first(
    emu_dir, numpy_as_cupy, warps, ahead
):
    """19's L2 requests (kept by the emulator, where they move nothing), each a lane's 16 bytes:
    together exactly the 1 KB of Wt of every group a warp loads after its first (the first it
    loads itself before any request), each 16 bytes once, none past a warp's last group, none
    outside Wt; with a warp of no group (K / 128 < WARPS) and a tile of one group per warp;
    the products still right."""
    want_point = {"AHEAD": ahead, "MIN_BLOCKS": 32 // warps, "WARPS": warps}
    (v,) = [
        c for c in STUDY.candidates if c.tuned_from == "19_l2_ahead" and c.tune_point == want_point
    ]
    tol = W4.tolerance({}, "bfloat16")
    for M, N, K in [(1, 37, 1152), (3, 100, 512), (2, 20, 128)]:
        sizes = {"M": M, "N": N, "K": K}
        printed: list[str] = []
        case = _emulate(emu_dir, v, sizes, printed=printed)
        assert W4.check(case, tol, f"w4a16/{v.id} at {M}x{N}x{K}").rel_err < 4e-3
        got = _prefetched(printed[0]) if printed[0].strip() else {}
        assert set(got) <= {"Wq"}, got  # W only, never the scales or x
        G, tiles = K // 128, -(-N // 16)
        groups = [t * G + gi for t in range(tiles) for gi in range(warps, G)]  # k >= 1
        want = [((u * 64 + i) * 16, 16) for u in groups for i in range(64)]
        assert got.get("Wq", []) == want, (v.id, sizes)


RING_20 = [c for c in STUDY.candidates if c.tuned_from == "20_tiled_ring"]


@pytest.mark.parametrize("v", RING_20, ids=lambda v: v.id)
def test_the_ring_step_refills_every_slot_and_keeps_its_products(emu_dir, numpy_as_cupy, v):
    """20's rings where each warp walks more groups than it has slots (K = 8192 and 5120: 10 to
    32 groups a warp against 3 to 8 slots), so every slot is filled again several times, on a
    ragged last tile and across passes of M > 8 (the rings and the partials laid over them
    used again): the products still right, y written everywhere."""
    tol = W4.tolerance({}, "bfloat16")
    for M, N, K in [(1, 20, 8192), (9, 16, 5120)]:
        assert K // 128 // v.defines["WARPS"] > v.defines["STAGES"]  # groups a warp
        case = _emulate(emu_dir, v, {"M": M, "N": N, "K": K})
        assert W4.check(case, tol, f"w4a16/{v.id} at {M}x{N}x{K}").rel_err < 4e-3


@pytest.mark.parametrize("v", RING_20, ids=lambda v: v.id)
def test_the_ring_step_waits_for_its_copies_before_it_reads_a_slot(tmp_path, v):
    """20 orders its rings by cp.async.wait_group alone, an asm statement without a memory
    clobber: nothing in the C++ keeps the compiler from moving a shared load of a slot above
    it, and the emulator, which copies at once, cannot see it. So the order is read from the
    SASS: in each walk loop (16 batch rows a pass and 8) the refill's copies (LDGSTS) come
    before the wait (DEPBAR.LE), so that they are in flight while the warp waits, and every
    shared load of the loop after it. (ptxas's never-taken `@!PT LDS RZ, [RZ]` before a copy
    into shared memory reads nothing.)"""
    from kernelbook.build import loops
    from kernelbook.build import nvcc as build

    cubin = tmp_path / "kernel.cubin"
    build.compile_variant(v, ARCH, FLAGS, REPO, cubin)
    text = build.sass_text(cubin, 120, v.id)
    walks = []
    for function, insns in loops.parse(text).items():
        found = loops.function_loops(function, insns)
        inner = [lp for lp in found if not any(lp.holds(o) for o in found)]
        walks += [lp for lp in inner if "DEPBAR.LE" in lp.ops]
    assert len(walks) == 2, [lp.ops for lp in walks]
    for lp in walks:
        ops = [i.op for i in lp.insns if not i.args.startswith("RZ, [RZ]")]
        wait = ops.index("DEPBAR.LE")
        assert ops.count("DEPBAR.LE") == 1, ops
        copies = [k for k, op in enumerate(ops) if op.startswith("LDGSTS")]
        reads = [k for k, op in enumerate(ops) if op.startswith("LDS")]
        assert len(copies) == 3 and max(copies) < wait, ops  # 2 x 16 bytes of W, 4 of scales
        assert reads and min(reads) > wait, ops


def test_the_emulated_check_fails_kernels_that_skip_rows_or_misread_nibbles(emu_dir, numpy_as_cupy):
    """01 on half its grid leaves rows of y at the NaN poison; 01 given weights whose nibbles
    are in the other order within each word (a kernel reading them high-first sees this)
    computes a different product: the check catches both (so the test above can fail)."""
    v = STUDY.variant("01_i2f_warp_per_row")
    sizes = {"M": 2, "N": 64, "K": 256}
    (L,) = v.launches(sizes)
    case = _emulate(emu_dir, v, sizes, grid=L.grid[0] // 2)
    with pytest.raises(NonFinite, match="01_i2f_warp_per_row at 2x64x256"):
        W4.check(case, 1e-2, "w4a16/01_i2f_warp_per_row at 2x64x256 (emulated)")
    case = _case(sizes)
    words = case.inputs["Wq"]
    swapped = np.zeros_like(words)
    for j in range(8):
        swapped |= ((words >> np.uint32(4 * j)) & np.uint32(15)) << np.uint32(4 * (7 - j))
    case.inputs["Wq"] = swapped
    case.input_copies["Wq"] = swapped.copy()
    case = _emulate(emu_dir, v, sizes, case=case)
    with pytest.raises(WrongResult, match="relative error"):
        W4.check(case, 1e-2, "w4a16/01_i2f_warp_per_row at 2x64x256 (emulated)")


# ------------------------------------------------------------------------------------------
# on a GPU (marked gpu; skipped, visibly, where NVML finds none)

INFO, WHY = gpu.detect()
FAST = {"studies": ["w4a16"], "timing": CHECK_TIMING}
# small; odd N (rows past N), M past the batch tile; K of one group and of 113; the headline
GPU_SIZES = ["4x256x512", "3x1001x1152", "33x4096x14464", "1x28672x4096"]
# every plain step, and each tuned step through its last candidate (13's: the tiled layout,
# packed by the problem's own setup with CuPy)
GPU_JOBS = [v.id for v in STUDY.variants if not v.is_tuned] + [
    v.candidates[-1] for v in STUDY.variants if v.is_tuned
]


@pytest.mark.parametrize("vid", GPU_JOBS)
@pytest.mark.gpu
@pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}")
def test_every_variant_and_both_baselines_correct_on_the_gpu(bench_batch, vid):
    df = bench_batch(FAST, "w4a16", GPU_JOBS, GPU_SIZES, vid)
    assert len(df) == len(GPU_SIZES)
    for _, row in df.iterrows():
        assert_checked(row)
        extras = json.loads(row["extra_baselines"])
        extra = extras["cublas_bf16"]
        assert extra["rel_err"] < row["tolerance"] and extra["median_ms"] > 0
        tiny = extras["tinygemm_int4"]  # on the host's torch; it may refuse N % 8 != 0
        if row["N"] % 8:
            assert "rel_err" in tiny or tiny["error"], tiny
        else:
            assert tiny.get("rel_err", 1) < row["tolerance"] and tiny["median_ms"] > 0, tiny
