"""The attention study without a GPU: its config, its cost model and reference, the
several-baselines plumbing (config, table, figures) on real Parquet, and its kernels built by
the real nvcc (no spills, tensor-core SASS where the step says so)."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_tables import measurement

from kernelbook import config, tables
from kernelbook.build import nvcc as build
from kernelbook.config import ConfigError
from kernelbook.problems import attention, get
from kernelbook.report import figures

ATT = get("attention")
REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def study():
    project = config.load_project_file(
        REPO_ROOT / "config" / "config.yaml", overrides={"studies": ["attention"]}
    )
    return project.study("attention"), project


def test_config_loads_with_both_baselines_and_both_regimes(study):
    st, _ = study
    assert st.baseline == "sdpa_flash"
    assert st.extra_baselines == ("sdpa_cudnn",)
    assert st.headline == {"B": 4, "H": 16, "S": 4096, "D": 128, "causal": 0}
    assert len(st.sizes) == 26
    for d, h in ((128, 16), (64, 32)):
        group = [s for s in st.sizes if s["D"] == d and s["S"] != 1000]
        assert {s["H"] for s in group} == {h}
        assert {s["B"] * s["S"] for s in group} == {16384}  # 16k tokens a batch
        assert {s["causal"] for s in group} == {0, 1}
    assert {s["causal"] for s in st.sizes if s["S"] == 1000} == {0, 1}
    ids = [v.id for v in st.variants]
    assert ids == sorted(ids)
    for v in st.variants:
        assert v.says and v.predict and v.computes == "o_and_lse"
    # the SIMT steps skip the sizes they would take seconds at, visibly (requires)
    fused = st.variant("02_fused_row")
    assert fused.unmet({"B": 1, "H": 16, "S": 16384, "D": 128, "causal": 0}) == ["S <= 4096"]
    assert not st.variant("04_fa2_mma").unmet({"B": 2, "H": 16, "S": 1000, "D": 128, "causal": 1})


def test_naive_step_is_three_kernels_with_a_workspace(study):
    st, _ = study
    v = st.variant("01_naive")
    s = {"B": 4, "H": 16, "S": 4096, "D": 128, "causal": 0}
    assert v.entries == ("attn_naive_scores", "attn_naive_softmax", "attn_naive_pv")
    grids = [launch.grid for launch in v.launches(s)]
    assert grids == [(256, 256, 64), (4096, 64, 1), (1024, 64, 1)]
    assert v.workspace_bytes(s) == 4 * 4 * 16 * 4096 * 4096
    assert "then" in v.spec() and "workspace" in v.spec()
    assert v.unmet({**s, "B": 2, "S": 8192}) == ["S <= 4096"]
    assert "then" not in st.variant("04_fa2_mma").spec()  # other specs (and hashes) unchanged


def test_baseline_list_rejects_unknown_names(tmp_path, study):
    _, project = study
    text = (REPO_ROOT / "config/studies/attention.yaml").read_text()
    bad = tmp_path / "attention.yaml"
    bad.write_text(text.replace("[sdpa_flash, sdpa_cudnn]", "[sdpa_flash, sdpa_math]"))
    with pytest.raises(ConfigError, match=r"baseline: .* not 'sdpa_math'"):
        config.load_study(bad, project.settings, REPO_ROOT)


def test_several_kernels_only_for_cuda_c_through_cupy(tmp_path, study):
    """then: and workspace: are launched by the CuPy path: a triton variant, or one launched
    with clusters or tensor maps, that declares them is refused by name at load time."""
    _, project = study
    sgemm = (REPO_ROOT / "config/studies/sgemm.yaml").read_text()
    bad = tmp_path / "sgemm.yaml"
    old = "    entry: sgemm_triton\n"
    assert old in sgemm
    bad.write_text(sgemm.replace(old, old + '    workspace: "4 * M"\n'))
    with pytest.raises(
        ConfigError, match=r"14_triton.*workspace are for CUDA C .* not kind triton"
    ):
        config.load_study(bad, project.settings, REPO_ROOT)
    hgemm = (REPO_ROOT / "config/studies/hgemm.yaml").read_text()
    old = "    entry: hgemm_cluster_multicast\n"
    assert old in hgemm
    bad = tmp_path / "hgemm.yaml"
    then = "    then: [{entry: hgemm_cluster_multicast, grid: [1], block: [1]}]\n"
    bad.write_text(hgemm.replace(old, old + then))
    with pytest.raises(ConfigError, match=r"09_cluster_multicast.*then are .* not cluster/tma"):
        config.load_study(bad, project.settings, REPO_ROOT)


def test_the_tma_step_maps_q_k_v_as_stacked_heads(tmp_path, study):
    """07's tensor maps: each of Q, K, V is B*H*S rows of D bf16 (the launcher encodes one
    map per name, in the config's order); a map of the logsumexp (float32, not a matrix of
    the problem) is refused by name."""
    st, project = study
    v = st.variant("07_wgmma_tma")
    assert [
        name
        for name, *_ in v.launch(
            {"B": 2, "H": 3, "S": 1000, "D": 128, "causal": 0}, 232448, 132
        ).tma
    ] == ["Q", "K", "V"]
    assert ATT.matrices({"B": 2, "H": 3, "S": 1000, "D": 128, "causal": 1})["K"] == (6000, 128)
    text = (REPO_ROOT / "config/studies/attention.yaml").read_text()
    bad = tmp_path / "attention.yaml"
    old = "      V: {box: [BN, 64], swizzle: 128}\n"
    assert old in text
    bad.write_text(text.replace(old, old + "      L: {box: [BN, 64], swizzle: 128}\n"))
    with pytest.raises(
        ConfigError, match=r"07_wgmma_tma.*tma.L: problem 'attention' has no matrix 'L'"
    ):
        config.load_study(bad, project.settings, REPO_ROOT)


def test_causal_may_be_zero_but_other_sizes_may_not(tmp_path, study):
    _, project = study
    text = (REPO_ROOT / "config/studies/attention.yaml").read_text()
    bad = tmp_path / "attention.yaml"
    bad.write_text(text.replace("{B: 2, H: 16, S: 1000", "{B: 0, H: 16, S: 1000"))
    with pytest.raises(ConfigError, match=r"sizes\[2\]: B: expected a positive integer"):
        config.load_study(bad, project.settings, REPO_ROOT)
    assert ATT.parse_size("B=1,H=2,S=3,D=64,causal=0")["causal"] == 0
    with pytest.raises(ValueError):
        ATT.parse_size("B=0,H=2,S=3,D=64,causal=0")


def test_flops_follow_flashattention_convention():
    s = {"B": 4, "H": 16, "S": 4096, "D": 128, "causal": 0}
    assert ATT.flops(s) == 4 * 4 * 16 * 4096**2 * 128
    assert ATT.flops({**s, "causal": 1}) == ATT.flops(s) / 2
    assert ATT.min_bytes(s, "bfloat16") == 4 * 4 * 16 * 4096 * 128 * 2


@pytest.mark.parametrize("causal", [0, 1])
def test_chunked_reference_is_attention(causal):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((3, 37, 16)) for _ in range(3))
    scale = 1 / math.sqrt(16)
    o, lse = attention.attention64(np, q, k, v, bool(causal), scale, chunk_bytes=8 * 3 * 37 * 5)
    s = np.einsum("bid,bjd->bij", q, k) * scale
    if causal:
        s = np.where(np.triu(np.ones((37, 37), bool), 1), -np.inf, s)
    want_l = np.log(np.exp(s).sum(-1))
    want_o = np.einsum("bij,bjd->bid", np.exp(s - want_l[..., None]), v)
    np.testing.assert_allclose(o, want_o, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, want_l, rtol=1e-12)
    if causal:
        np.testing.assert_allclose(o[:, 0], v[:, 0], rtol=1e-12)  # row 0 sees key 0 only


def test_case_checks_lse_only_when_declared():
    s = {"B": 1, "H": 2, "S": 40, "D": 64, "causal": 1}
    qkv = [
        np.random.default_rng(i).standard_normal(2 * 40 * 64).astype(np.float32) for i in (1, 2, 3)
    ]
    plain = ATT.build_case(np, s, "bfloat16", 0, qkv, guard=8)
    with_l = ATT.build_case(np, s, "bfloat16", 0, qkv, guard=8, computes="o_and_lse")
    assert set(plain.outputs) == {"O"} and set(with_l.outputs) == {"O", "L"}
    assert with_l.reference["L"].shape == (2 * 40,)
    assert len(plain.args) == 11 and plain.args[4] == np.float32(1 / 8)
    with pytest.raises(KeyError, match="no alternative"):
        ATT.build_case(np, s, "bfloat16", 0, qkv, computes="lse_only")


def _rows_with_two_baselines():
    rows = []
    for v, speed in (("01_naive", 1.0), ("02_fast", 3.0)):
        for n in (512, 1024):
            r = measurement(v, n, median=0.05 * (n / 512) ** 3 / speed)
            extra_ms = r["baseline_median_ms"] / 2  # the second baseline twice the first
            r["extra_baselines"] = json.dumps(
                {
                    "cudnn": {
                        "mode": "second",
                        "median_ms": extra_ms,
                        "tflops": r["flop"] / (extra_ms * 1e-3) / 1e12,
                        "gbps": r["bytes_min"] / (extra_ms * 1e-3) / 1e9,
                        "rel_err": 1e-3,
                        "pct": 100.0 * extra_ms / r["median_ms"],
                    }
                }
            )
            rows.append(r)
    rows.append(measurement("02_fast", 2048, status="skipped", reason="requires N <= 1024"))
    return rows


def test_extra_baselines_round_trip_parquet_and_spread_into_columns(tmp_path):
    path = tmp_path / "measurements.parquet"
    tables.write(_rows_with_two_baselines(), path, "measurements", ("M", "N", "K"))
    df = tables.read(path)
    assert tables.extra_baseline_names(df) == ["cudnn"]
    wide = tables.extra_baseline_columns(df)
    ok = wide[wide["status"] == "ok"]
    np.testing.assert_allclose(ok["cudnn_tflops"], 2 * ok["baseline_tflops"])
    np.testing.assert_allclose(ok["pct_of_cudnn"].astype(float), ok["pct_of_baseline"] / 2)
    # a single-baseline table (older rows: no column at all) gains nothing
    old = tables.extra_baseline_columns(df.drop(columns=["extra_baselines"]))
    assert not [c for c in old.columns if "cudnn" in c]


def test_figures_draw_the_second_baseline(tmp_path):
    path = tmp_path / "measurements.parquet"
    tables.write(_rows_with_two_baselines(), path, "measurements", ("M", "N", "K"))
    df = tables.read(path)
    order = ["01_naive", "02_fast"]
    assert figures._extra_levels(df[df["size"] == "1024x1024x1024"]) == pytest.approx(
        {"cudnn": 200.0}
    )
    fig = figures.sweep(df, order, tmp_path / "figs", baseline_label="cuBLAS")
    assert "cudnn (baseline)" in (tmp_path / "figs" / "sweep.svg").read_text()
    head = df[df["size"] == "1024x1024x1024"].set_index("variant")
    figures.ladder(head, order, tmp_path / "figs", size_label="1024", baseline_label="cuBLAS")
    assert "cudnn (200 % of cuBLAS)" in (tmp_path / "figs" / "ladder.svg").read_text()
    assert fig.png


@pytest.mark.slow
def test_kernels_compile_without_spills(study, tmp_path):
    st, project = study
    s = project.settings
    seen = set()
    for v in [*st.variants, *st.candidates]:  # 12's candidates: every tile and ring depth
        key = (v.source, json.dumps(v.defines))
        if key in seen:
            continue
        seen.add(key)
        res = build.compile_variant(
            v, s["arch"], list(s["nvcc_flags"]), REPO_ROOT, tmp_path / f"{v.id}.cubin"
        )
        r = res.resources

        def count(prefix, res=res):
            return sum(n for op, n in res.sass.items() if op.split(".")[0] == prefix)

        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0 and r.stack_bytes == 0, v.id
        if v.then:  # the histogram counts every kernel of the variant, not only the first
            dump = subprocess.run(
                [build.tool("cuobjdump"), "-sass", str(tmp_path / f"{v.id}.cubin")],
                capture_output=True,
                text=True,
                check=True,
            )
            first = build.parse_sass(dump.stdout)[v.entry]
            assert sum(res.sass.values()) > sum(first.values()), v.id
        if v.id.startswith(("04", "05", "06")):
            assert count("HMMA") > 0 and count("LDSM") > 0, v.id
        if v.id.startswith(("05", "06")):
            assert count("LDGSTS") > 0, v.id
        if v.id.startswith(("01", "02", "03")):
            assert count("HMMA") == 0, v.id
        if v.arch == "sm_90a":  # 07 on: Hopper's warpgroup MMA and TMA, no mma.sync
            assert count("HGMMA") > 0 and count("UTMALDG") > 0, v.id
            assert count("HMMA") == 0 and count("LDSM") == 0, v.id
            # 08 on: a producer warpgroup gives its registers to the two that compute
            assert (count("USETMAXREG") > 0) == (v.id >= "08"), v.id
            assert "C7508" not in res.log, f"{v.id}: ptxas ignored setmaxnreg"
            # no wgmma serialised by ptxas (C7513, C7515, ...): 10 keeps a product in flight
            # under the softmax only if nothing writes its registers meanwhile
            assert "are serialized" not in res.log, f"{v.id}: ptxas serialised the wgmmas"


def test_facet_figure_against_s_per_d_and_causal(tmp_path):
    rows = []
    for d, h in ((128, 16), (64, 32)):
        for causal in (0, 1):
            for S in (512, 1024, 2048):
                s = {"B": 16384 // S, "H": h, "S": S, "D": d, "causal": causal}
                for v, speed in (("04_fa2_mma", 1.0), ("05_fa2_pipelined", 1.3)):
                    r = measurement(v, 64, median=1.0 / speed)
                    for k in ("M", "N", "K"):
                        r.pop(k)
                    r.update(s, size=ATT.label(s), flop=ATT.flops(s))
                    r["tflops"] = r["flop"] / 1e-3 / 1e12 * speed
                    r["baseline_tflops"] = r["flop"] / 1e-3 / 1e12 * 1.2
                    r["extra_baselines"] = json.dumps({"sdpa_cudnn": {"tflops": 2 * r["tflops"]}})
                    rows.append(r)
    path = tmp_path / "m.parquet"
    tables.write(rows, path, "measurements", ATT.size_names)
    df = tables.read(path)
    fig = figures.sweep_facets(
        df, ["04_fa2_mma", "05_fa2_pipelined"], tmp_path, x="S", by=("D", "causal"),
        baseline_label="sdpa_flash",
    )  # fmt: skip
    svg = (tmp_path / "sweep_facets.svg").read_text()
    assert "D=64, causal=0" in svg and "D=128, causal=1" in svg
    assert "sdpa_cudnn (baseline)" in svg and "sdpa_flash (baseline)" in svg
    assert fig.png and "dotted: sdpa_cudnn" in fig.caption


def test_launcher_runs_every_kernel_in_order_with_its_geometry(study, monkeypatch):
    """launch.kernel.kernel_launcher on a variant of three kernels: one run() launches them in
    order, each with its own grid, block and shared memory, on the same arguments; the
    row's geometry is the first kernel's."""
    from types import SimpleNamespace

    from kernelbook.launch import kernel as launch_kernel

    st, _ = study
    monkeypatch.setattr(launch_kernel, "device_sm_count", lambda: 114)
    v = dataclasses.replace(st.variant("01_naive"), workspace=0)  # no device buffer here
    s = {"B": 2, "H": 16, "S": 1000, "D": 128, "causal": 1}
    calls = []

    def kernel_fn(i):
        return lambda grid, block, args, shared_mem: calls.append(
            (i, grid, block, shared_mem, args)
        )

    kernel = launch_kernel.Kernel("cuda", kernel_fn(0), None, (kernel_fn(1), kernel_fn(2)))
    run, launch = launch_kernel.kernel_launcher(kernel, st, v, s, SimpleNamespace(args=("q", "k")))
    run()
    expected = v.launches(s)
    assert launch == expected[0]
    assert [c[0] for c in calls] == [0, 1, 2]
    assert [(c[1], c[2], c[3]) for c in calls] == [(e.grid, e.block, e.smem) for e in expected]
    assert all(c[4] == ("q", "k") for c in calls)
    # a grid over the device's SMs takes the count the launcher asked the device for
    per_sm = dataclasses.replace(v, grid=("SM_COUNT", "B * H"), then=())
    calls.clear()
    run, launch = launch_kernel.kernel_launcher(
        launch_kernel.Kernel("cuda", kernel_fn(0)), st, per_sm, s, SimpleNamespace(args=())
    )
    run()
    assert launch.grid == (114, 32, 1) and calls[0][1] == (114, 32, 1)


@pytest.mark.parametrize(
    ("study", "kept_out"),
    [("attention", set()), ("transpose", {"00_copy"})],
)
def test_headline_leaves_out_reference_kernels_but_not_supersets(study, kept_out):
    """attention's steps all compute O and L (``computes: o_and_lse``, a superset of the
    problem): they compete for the headline. transpose's ``computes: copy`` is a reference
    kernel and does not. From the published tables."""
    from kernelbook.layout import DATA_TABLES, published_paths
    from kernelbook.report import data

    p = published_paths("worklogs", "nvidia-h200", study)
    d = data.load({k: p[k] for k in (*DATA_TABLES, "meta")}, mode="replay")
    assert data.reference_variants(d) == kept_out
    best = data.summary(d)["best"]
    assert best is not None and best["variant"] not in kept_out
    ok = data.headline_rows(d)
    ok = ok[(ok["status"] == "ok") & ~ok["variant"].isin(kept_out)]
    assert best["pct_of_baseline"] == pytest.approx(ok["pct_of_baseline"].astype(float).max())


def test_the_fp32_pipe_exp2_is_a_fiftieth_of_bf16s_rounding(tmp_path):
    """exp2_fma.cuh (step 13's exp2s off the MUFU), compiled for the CPU as the kernels have
    it: within 1e-4 of 2^x (bf16, which P is rounded to next, is 3.9e-3) from 2^-125 to 1,
    and under 2^-125, never negative, where the kernel clamps (x <= -126)."""
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    src = tmp_path / "exp2.cpp"
    src.write_text(
        "#define KERNELBOOK_EMU\n#define __device__\n#define __forceinline__ inline\n"
        '#include <cmath>\n#include <cstdio>\n#include <vector>\n#include "exp2_fma.cuh"\n'
        "int main(int, char** argv) {\n"
        '  FILE* f = fopen(argv[1], "rb"); std::vector<float> x(atoi(argv[3]));\n'
        "  fread(x.data(), 4, x.size(), f); fclose(f);\n"
        "  for (float& v : x) v = exp2_fma(v);\n"
        '  f = fopen(argv[2], "wb"); fwrite(x.data(), 4, x.size(), f); fclose(f);\n}\n'
    )
    exe = tmp_path / "exp2"
    inc = REPO_ROOT / "kernels" / "attention"
    subprocess.run(
        ["g++", "-O1", "-std=c++17", f"-I{inc}", str(src), "-o", str(exe)],
        check=True,
        capture_output=True,
    )
    rng = np.random.default_rng(13)
    x = np.concatenate(
        [
            np.linspace(-130.0, 0.0, 400_001, dtype=np.float32),
            -rng.exponential(3.0, 200_000).astype(np.float32),
            np.float32([0.0, -0.5, -1.5, -125.0, -126.0, -126.5, -1e30]),
        ]
    )
    (tmp_path / "x.bin").write_bytes(x.tobytes())
    subprocess.run(
        [str(exe), str(tmp_path / "x.bin"), str(tmp_path / "y.bin"), str(x.size)], check=True
    )
    y = np.frombuffer((tmp_path / "y.bin").read_bytes(), dtype=np.float32).astype(np.float64)
    exact = np.exp2(x.astype(np.float64))
    normal = x > -125.0
    rel = np.abs(y[normal] / exact[normal] - 1.0)
    assert rel.max() < 1e-4, (x[normal][rel.argmax()], rel.max())
    assert ((y[~normal] >= 0.0) & (y[~normal] < 2.0**-125)).all()
    assert y[x == 0.0][0] == pytest.approx(1.0, rel=1e-4)


def test_step_13_takes_a_quarter_of_the_unmasked_exp2s_off_the_mufu(tmp_path, study):
    """11 and 13 differ in FA3_POLY_EXP only: 13's SASS has fewer MUFU.EX2 (a quarter of each
    unmasked softmax's) and more FFMA and FADD; neither serialises its wgmmas."""
    st, project = study
    s = project.settings
    counts = {}
    for vid in ("11_fast_exp2", "13_fma_exp2"):
        v = st.variant(vid)
        res = build.compile_variant(
            v, s["arch"], list(s["nvcc_flags"]), REPO_ROOT, tmp_path / f"{vid}.cubin"
        )
        assert "are serialized" not in res.log, vid
        counts[vid] = {
            op: sum(n for o, n in res.sass.items() if o.split(".")[0] == op)
            for op in ("MUFU", "FFMA", "FADD", "HGMMA")
        }
    before, after = counts["11_fast_exp2"], counts["13_fma_exp2"]
    assert after["HGMMA"] == before["HGMMA"]
    assert after["MUFU"] < before["MUFU"] * 0.95, counts
    assert after["FFMA"] > before["FFMA"] and after["FADD"] > before["FADD"], counts


def test_the_three_warpgroup_step_is_for_head_size_64_only(study):
    """14 compiles the D = 64 body only (FA3_HEAD_DIM): its D = 128 sizes are skipped rows
    that name the requirement, and its block is 192 queries, 512 threads, a 4-stage ring of
    64-key tiles in 88 KiB."""
    st, _ = study
    v = st.variant("14_three_warpgroups")
    d64 = {"B": 8, "H": 32, "S": 2048, "D": 64, "causal": 0}
    assert v.unmet({**d64, "D": 128}) == ["D == 64"] and v.unmet(d64) == []
    (L,) = v.launches(d64)
    assert L.grid == (11, 256, 1) and L.block == (512, 1, 1)
    assert L.smem == (192 + 2 * 4 * 64) * 64 * 2 + 1024


def test_the_persistent_steps_take_an_sm_a_block_where_tiles_are_equal(study):
    """15 and 16: non-causal, one block an SM (the device's SM count) over every query tile,
    and two Q buffers in shared memory; causal (unequal tiles), one block a tile in a 1-D
    grid, the hardware's scheduler balancing them. 16 runs at D = 64 only."""
    st, _ = study
    head = {"B": 4, "H": 16, "S": 4096, "D": 128, "causal": 0}
    d64 = {"B": 8, "H": 32, "S": 2048, "D": 64, "causal": 0}
    small = {"B": 1, "H": 2, "S": 256, "D": 64, "causal": 0}  # 4 tiles: fewer than the SMs
    v = st.variant("15_persistent")
    for sm_count in (132, 78):
        (L,) = v.launches(head, sm_count=sm_count)
        assert L.grid == (sm_count, 1, 1) and L.block == (384, 1, 1)
    (L,) = v.launches({**head, "causal": 1}, sm_count=132)
    assert L.grid == (32 * 4 * 16, 1, 1)  # cdiv(S, 128) query blocks of each (b, h)
    (L,) = v.launches(small, sm_count=132)
    assert L.grid == (4, 1, 1)
    (L,) = v.launches(head, sm_count=132)
    assert L.smem == (2 * 128 + 2 * 2 * 128) * 128 * 2 + 1024  # two Q buffers, a 2-stage ring
    w = st.variant("16_persistent_fma_exp2")
    assert w.unmet(head) == ["D == 64"] and w.unmet(d64) == []
    (L,) = w.launches(d64, sm_count=132)
    assert L.grid == (132, 1, 1) and L.smem == (2 * 128 + 2 * 2 * 128) * 64 * 2 + 1024
    # 17: 16 tuned (the cubic's share, the ring's depth), D = 64 only; a 3-stage ring's smem
    t = st.variant("17_d64_tuned")
    assert t.is_tuned and len(t.candidates) == 8
    c = st.variant("17_d64_tuned__POLY2_STAGES3")
    assert c.unmet(head) == ["D == 64"] and c.unmet(d64) == []
    assert c.defines["POLY"] == 2 and c.defines["STAGES"] == 3
    (L,) = c.launches(d64, sm_count=132)
    assert L.grid == (132, 1, 1) and L.smem == (2 * 128 + 2 * 3 * 128) * 64 * 2 + 1024


def test_step_17s_knob_moves_exp2s_between_the_mufu_and_the_fp32_pipe(tmp_path, study):
    """17's POLY is the cubic's share: every POLY-th pair off the MUFU. The smaller it is, the
    fewer MUFU.EX2 and the more FFMA in the SASS, the wgmmas the same and none serialised;
    POLY 4 is 16's kernel: the same instruction mix."""
    st, project = study
    s = project.settings
    counts, texts = {}, {}
    for vid in (
        "16_persistent_fma_exp2",
        "17_d64_tuned__POLY2_STAGES2",
        "17_d64_tuned__POLY4_STAGES2",
        "17_d64_tuned__POLY6_STAGES2",
    ):
        v = st.variant(vid)
        res = build.compile_variant(
            v, s["arch"], list(s["nvcc_flags"]), REPO_ROOT, tmp_path / f"{vid}.cubin"
        )
        assert "are serialized" not in res.log, vid
        assert res.resources.spill_store_bytes == 0 and res.resources.spill_load_bytes == 0
        counts[vid] = {
            op: sum(n for o, n in res.sass.items() if o.split(".")[0] == op)
            for op in ("MUFU", "FFMA", "HGMMA")
        }
        texts[vid] = res.sass
    p2, p4, p6 = (counts[f"17_d64_tuned__POLY{n}_STAGES2"] for n in (2, 4, 6))
    assert p2["HGMMA"] == p4["HGMMA"] == p6["HGMMA"] > 0, counts
    assert p2["MUFU"] < p4["MUFU"] < p6["MUFU"], counts
    assert p2["FFMA"] > p4["FFMA"] > p6["FFMA"], counts
    assert texts["17_d64_tuned__POLY4_STAGES2"] == texts["16_persistent_fma_exp2"]
