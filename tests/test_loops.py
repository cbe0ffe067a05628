"""A kernel's hot loop from its SASS (kernelbook.build.loops): loops found by their backward
branches in real cuobjdump output of real nvcc builds, the hot one chosen and counted, the
loops table of a study made by the DAG, and the line each step's section shows."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
from conftest import REPO, kernelbook_cli

from kernelbook import config as cfg
from kernelbook import tables
from kernelbook.build import loops
from kernelbook.build.nvcc import compile_variant, sass_text
from kernelbook.config.schema import ConfigError
from kernelbook.report import publish
from kernelbook.report.markdown import fmt

SGEMM = cfg.load_project_file(
    REPO / "config" / "config.yaml", overrides={"studies": ["sgemm"]}
).study("sgemm")
BEST10 = "10_warptiling__BM128_BN128_BK16_WM64_WN32_WNITER2_TM4_TN8_MIN_BLOCKS1_GROUP_M0_LOAD_AT16"

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


def base_ops(loop) -> set[str]:
    return {loops.base(op) for op in loop.ops}


def sass_line(addr: int, text: str) -> str:
    return f"        /*{addr:04x}*/                   {text} ;   /* 0x000000000000 */"


def function(name: str, body: list[tuple[int, str]]) -> str:
    return "\n".join([f"\t\tFunction : {name}", *(sass_line(a, t) for a, t in body)])


def test_loops_are_closed_by_backward_branches_and_the_one_with_most_math_is_hot():
    text = function(
        "k",
        [
            (0x00, "MOV R1, c[0x0][0x28]"),
            # an outer loop (0x10 .. 0x90) around an inner one (0x20 .. 0x50)
            (0x10, "LDG.E R2, desc[UR4][R4.64]"),
            (0x20, "FFMA R3, R2.reuse, R2, R3"),
            (0x30, "FFMA R5, R2, R2, R5"),
            (0x40, "@P0 BRA 0x20"),  # a continue back to the inner loop's start
            (0x50, "@P1 BRA 0x20"),
            (0x60, "STG.E desc[UR4][R4.64], R3"),
            (0x70, "BAR.SYNC.DEFER_BLOCKING 0x0"),
            (0x80, "FFMA R7, R2, R2, R7"),
            (0x90, "@P2 BRA 0x10"),
            # a loop of its own with less math
            (0xA0, "FADD R8, R8, 1"),
            (0xB0, "LDS.128 R12, [R0]"),
            (0xC0, "@P3 BRA 0xa0"),
            (0xD0, "BRA 0x100"),  # forward: no loop
            (0x100, "EXIT"),
            (0x110, "BRA 0x110"),  # the branch to itself after EXIT: no loop
        ],
    )
    insns = loops.parse(text)["k"]
    found = loops.function_loops("k", insns)
    assert [(lp.start, lp.end, len(lp.insns)) for lp in found] == [
        (0x10, 0x90, 9),
        (0x20, 0x50, 4),
        (0xA0, 0xC0, 3),
    ]
    # the outer loop does the most work (3 FFMAs), but the loop inside it does two thirds of
    # it: the outer one is a loop around the main one, and the inner one is hot
    hot, n = loops.hot_loop(text)
    assert (hot.start, hot.end, n) == (0x20, 0x50, 3)
    rows = {r["opcode"]: r for r in loops.rows("s", "v", text)}
    assert rows["FFMA"]["count"] == 2 and rows["FFMA"]["reuse"] == 1
    assert rows["FFMA"]["kind"] == "math" and rows["BRA"]["kind"] == "other"
    assert {r["instructions"] for r in rows.values()} == {4}
    assert {r["start"] for r in rows.values()} == {"0x0020"}
    # without the inner loop's math, the outer loop is the main one again
    plain = text.replace("FFMA R3, R2.reuse, R2, R3", "IADD3 R3, R2, R2, RZ").replace(
        "FFMA R5, R2, R2, R5", "IADD3 R5, R2, R2, RZ"
    )
    hot, _ = loops.hot_loop(plain)
    assert (hot.start, hot.end) == (0x10, 0x90)
    kinds = {r["opcode"]: r["kind"] for r in loops.rows("s", "v", plain)}
    assert kinds["BAR.SYNC.DEFER_BLOCKING"] == "barrier" and kinds["LDG.E"] == "global load"
    assert kinds["STG.E"] == "global store"
    # a main loop holding a spin loop (an mbarrier wait) and the math: the main loop, not
    # the spin; and around it, a loop of the same math and more: the main loop again
    spin = function(
        "k",
        [
            (0x00, "MOV R1, c[0x0][0x28]"),
            (0x10, "UIADD3 UR5, UR5, 0x1, URZ"),
            (0x20, "SYNCS.PHASECHK.TRANS64 P0, [R1], R2"),
            (0x30, "@!P0 BRA 0x20"),  # the spin
            (0x40, "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24"),
            (0x50, "@P1 BRA 0x10"),  # the main loop
            (0x60, "STG.E desc[UR4][R4.64], R3"),
            (0x70, "@P2 BRA 0x0"),  # around it
        ],
    )
    hot, n = loops.hot_loop(spin)
    assert (hot.start, hot.end, n, hot.count(loops.MATH)) == (0x10, 0x50, 3, 1)
    # two copies of a loop with the same math: the lean one (fewer instructions) is hot
    two = function(
        "k",
        [
            (0x00, "FFMA R1, R2, R3, R1"),
            (0x10, "ISETP.GE.AND P0, PT, R4, R5, PT"),
            (0x20, "@P0 BRA 0x0"),
            (0x30, "FFMA R1, R2, R3, R1"),
            (0x40, "@P0 BRA 0x30"),
        ],
    )
    assert loops.hot_loop(two)[0].start == 0x30
    # ptxas's register move on the MMA pipe is no math
    assert loops.kind("HFMA2.MMA") == "other" and loops.kind("HFMA2") == "math"
    # straight-line code has no loop, and its cubin no rows
    flat = function("k", [(0x0, "FFMA R1, R2, R3, R1"), (0x10, "EXIT"), (0x20, "BRA 0x20")])
    assert loops.hot_loop(flat) == (None, 0)
    assert loops.rows("s", "v", flat) == []


def test_a_loops_work_counts_each_instructions_operations():
    assert loops.flops("FFMA") == 64 and loops.flops("FFMA.FTZ") == 64
    assert loops.flops("FMUL") == loops.flops("FADD") == 32
    assert loops.flops("HFMA2") == 128 and loops.flops("HFMA2.MMA") == 0  # a move
    assert loops.flops("HMMA.16816.F32.BF16") == 2 * 16 * 8 * 16
    assert loops.flops("HMMA.1688.F32.TF32") == 2 * 16 * 8 * 8
    assert loops.flops("IMMA.16832.S32.S8.S8") == 2 * 16 * 8 * 32
    assert loops.flops("HGMMA.64x128x16.F32.BF16") == 2 * 64 * 128 * 16 // 4  # a warp's share
    assert loops.flops("QGMMA.64x256x32.F32.E4M3.E4M3") == 2 * 64 * 256 * 32 // 4
    assert loops.flops("LDS.128") == loops.flops("IMAD") == 0
    # cuobjdump's lower-case shape letters are part of the mnemonic
    one = function(
        "k", [(0x0, "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24"), (0x10, "@P0 BRA 0x0")]
    )
    assert loops.parse(one)["k"][0].op == "HGMMA.64x128x16.F32.BF16"


@needs_nvcc
def test_the_hot_loop_of_a_real_sgemm_build_is_its_unguarded_main_loop(tmp_path):
    v = SGEMM.variant(BEST10)
    d = v.defines
    cubin = tmp_path / BEST10 / "kernel.cubin"
    cubin.parent.mkdir()
    compile_variant(v, "sm_90", ["-O3", "-lineinfo"], REPO, cubin)
    text = sass_text(cubin, 120, BEST10)
    hot, n = loops.hot_loop(text)
    assert n >= 2  # the guarded copy of the loop beside the unguarded one (FULL)
    assert hot.start < hot.end and base_ops(hot) >= {"FFMA", "LDS", "BAR"}
    counts = hot.ops
    # what the source unrolls: BK k-steps of (WMITER TM) x (WNITER TN) FFMAs, and per k-step
    # WMITER TM / 4 + WNITER TN / 4 fragment LDS.128s
    wmiter = d["WM"] * d["WN"] // (32 * d["TM"] * d["TN"] * d["WNITER"])
    ffma = d["BK"] * wmiter * d["TM"] * d["WNITER"] * d["TN"]
    lds = d["BK"] * (wmiter * d["TM"] // 4 + d["WNITER"] * d["TN"] // 4)
    assert counts["FFMA"] == ffma == 1024
    assert counts["LDS.128"] == lds
    assert sum(c for op, c in counts.items() if op.startswith("BAR.")) == 2
    others = loops.function_loops(hot.function, loops.parse(text)[hot.function])
    same_math = [lp for lp in others if lp.count(loops.MATH) == ffma and lp.start != hot.start]
    assert same_math and all(len(lp.insns) > len(hot.insns) for lp in same_math)
    # the verb: one row an opcode of that loop, the failed (empty) cubin left out
    empty = tmp_path / "99_failed" / "kernel.cubin"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    garbled = tmp_path / "98_garbled" / "kernel.cubin"  # cuobjdump cannot read it: named
    garbled.parent.mkdir()
    garbled.write_bytes(b"not a cubin")
    out = tmp_path / "loops.parquet"
    proc = kernelbook_cli(REPO, "loops", "sgemm", str(out), str(cubin), str(empty), str(garbled))
    assert proc.returncode == 0, proc.stderr
    assert "the hot loop of 1 of 3 cubin(s)" in proc.stdout
    assert "kernelbook loops: sgemm/98_garbled: cuobjdump -sass failed" in proc.stderr
    df = tables.read(out)
    assert set(df["variant"]) == {BEST10}
    assert dict(zip(df["opcode"], df["count"], strict=True)) == dict(counts)
    assert (df["instructions"] == len(hot.insns)).all() and df["cubin_sha256"].nunique() == 1


def test_a_compile_only_run_makes_each_studys_loops_table(built_repo):
    root, proc = built_repo
    assert proc.returncode == 0
    build = tables.read(root / "results" / "build" / "sgemm" / "build.parquet")
    df = tables.read(root / "results" / "build" / "sgemm" / "loops.parquet")
    built = build[(build["status"] == "ok") & build["kind"].isin(["cuda", "triton"])]
    # every kernel the sgemm ladder compiles has a main loop
    assert set(df["variant"]) == set(built["variant"])
    sha = dict(zip(built["variant"], built["cubin_sha256"], strict=True))
    for vid, rows in df.groupby("variant"):
        assert rows["cubin_sha256"].iloc[0] == sha[vid]
        assert rows["count"].sum() == rows["instructions"].iloc[0]
    assert (root / "results" / "build" / "attention" / "loops.parquet").is_file()


@needs_nvcc
def _published(vid: str, point: dict):
    """The variant the published rows name; a winner from before the tune space last changed
    (so that the config no longer lists it), built from its point as it was."""
    try:
        return SGEMM.variant(vid)
    except ConfigError:
        base = SGEMM.variant(SGEMM.variant(vid.split("__")[0]).candidates[0])
        d = {k: v for k, v in base.defines.items() if k not in base.tune_point} | point
        d["NUM_THREADS"] = (d["BM"] // d["WM"]) * (d["BN"] // d["WN"]) * 32  # the config's
        return dataclasses.replace(base, id=vid, defines=d, tune_point=point)


def test_each_step_section_shows_its_hot_loop(tmp_path):
    dest = tmp_path / "worklogs" / "nvidia-h200" / "sgemm"
    shutil.copytree(REPO / "worklogs" / "nvidia-h200" / "sgemm" / "data", dest / "data")
    meas = tables.read(dest / "data" / "measurements.parquet")
    head = meas[(meas["variant"] == "10_warptiling") & (meas["size"] == "4096x4096x4096")]
    point = json.loads(head.iloc[-1]["tune_point"])
    winner = "10_warptiling__" + "_".join(f"{k}{v}" for k, v in point.items())
    cubins = []
    for vid in (winner, "06_vectorized"):
        c = tmp_path / "build" / vid / "kernel.cubin"
        c.parent.mkdir(parents=True)
        compile_variant(_published(vid, point), "sm_90", ["-O3", "-lineinfo"], REPO, c)
        cubins.append(c)
    tables.write(loops.table("sgemm", cubins), dest / "data" / "loops.parquet", "loops")
    page = publish.render_published(
        tmp_path / "worklogs", "nvidia-h200", "sgemm", REPO / "analysis", dest
    )
    md = page.read_text()
    df = tables.read(dest / "data" / "loops.parquet")
    for vid in (winner, "06_vectorized"):
        rows = df[df["variant"] == vid]
        n = int(rows["instructions"].iloc[0])
        math = rows[rows["kind"] == "math"]
        line = next(ln for ln in md.splitlines() if ln.startswith(f"**Hot loop (SASS)** ({vid})"))
        assert f": {n} instructions an iteration ({rows['start'].iloc[0]} to " in line
        share = 100 * math["count"].sum() / n
        assert f"math {int(math['count'].sum())} ({fmt(share, 3)} %: FFMA " in line
        reuse = 100 * math["reuse"].sum() / math["count"].sum()
        assert line.endswith(f"{fmt(reuse, 3)} % of the math carries an operand-reuse flag.")
    # a step with no row in the table (01_naive here) has no such line
    assert not [ln for ln in md.splitlines() if ln.startswith("**Hot loop (SASS)** (01_naive)")]
