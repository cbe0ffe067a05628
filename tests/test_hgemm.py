"""The hgemm study without a GPU: its config, its sm_90a kernels through the real nvcc (the
Hopper instructions each step is about, in its SASS, and no spills), launch geometry, and the
errors of the cluster and tma keys, which name the study and the variant."""

from __future__ import annotations

import ctypes
import math
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO

from kernelbook import config as cfg
from kernelbook import problems
from kernelbook.build import nvcc as build
from kernelbook.launch import driver as launch
from kernelbook.profile import roofline

FLAGS = ["-O3", "-lineinfo"]
PROJECT = cfg.load_project_file(REPO / "config" / "config.yaml", overrides={"studies": ["hgemm"]})
HGEMM = PROJECT.study("hgemm")
ARCH = PROJECT.settings["arch"]  # sm_90: the sm_90a steps ask for their own target
SM90A = [v.id for v in HGEMM.variants if v.arch == "sm_90a" and not v.is_tuned]
# 05_cp_async (sm_90) is checked by tests/test_hgemm_steps.py
CANDIDATES = [c.id for c in HGEMM.candidates if c.arch == "sm_90a"]

# what each step is about, as SASS opcodes (prefixes of the full mnemonics)
EXPECTED_SASS = {
    "06_wgmma_tma": {"HGMMA", "UTMALDG", "SYNCS"},
    "07_warp_specialized": {"HGMMA", "UTMALDG", "SYNCS", "USETMAXREG"},
    "08_persistent": {"HGMMA", "UTMALDG", "SYNCS", "USETMAXREG"},
    "09_cluster_multicast": {"HGMMA", "UTMALDG.2D.MULTICAST", "SYNCS", "USETMAXREG", "UCGABAR"},
}


# ------------------------------------------------------------------------------------------
# the problem and the config


def test_problem_registered_and_cost_model():
    p = problems.get("hgemm")
    s = {"M": 4096, "N": 4096, "K": 4096}
    assert p.flops(s) == 2 * 4096**3
    assert p.min_bytes(s, "bfloat16") == 2 * 3 * 4096**2
    assert p.tolerance(s, "bfloat16") == pytest.approx(1e-2)
    assert p.peak == "bf16_tensor"
    assert p.matrices({"M": 3, "N": 5, "K": 7}) == {"A": (3, 7), "B": (5, 7), "C": (3, 5)}
    assert p.parse_size("4095x4097x1000") == {"M": 4095, "N": 4097, "K": 1000}


def test_study_loads_with_the_required_sizes():
    labels = [problems.get("hgemm").label(s) for s in HGEMM.sizes]
    for n in (512, 1024, 2048, 4096, 8192, 16384):
        assert f"{n}x{n}x{n}" in labels
    for extra in (
        "8192x28672x4096",
        "8192x4096x14336",
        "1000x1000x1000",
        "4095x4097x1000",
        "4096x4096x4104",  # K tail: rows 16 bytes past a multiple of 128 (issue 28)
    ):
        assert extra in labels
    assert HGEMM.headline == {"M": 4096, "N": 4096, "K": 4096}
    assert {"M": 8192, "N": 8192, "K": 8192} in HGEMM.profile_sizes
    assert HGEMM.second_headline == {"M": 8192, "N": 8192, "K": 8192}
    assert HGEMM.baseline == "cublas" and HGEMM.dtype == "bfloat16"
    for v in HGEMM.variants:
        assert v.says and "pct_of_baseline" in v.predict, v.id
    assert "hgemm" in cfg.read_yaml(REPO / "config" / "config.yaml")["studies"]  # in the book


def test_tuned_variant_candidates_fit_shared_memory():
    best = HGEMM.variant("10_best")
    assert best.is_tuned and len(best.candidates) >= 8
    for c in HGEMM.candidates:
        lim = cfg.smem_optin_limit(c.target(ARCH))
        for s in HGEMM.sizes:
            if not c.unmet(s):
                assert c.launch(s, lim).smem <= 227 * 1024


@pytest.mark.parametrize("vid", SM90A)
def test_launch_geometry(vid):
    v = HGEMM.variant(vid)
    assert v.target(ARCH) == "sm_90a"
    for s in HGEMM.sizes:
        if v.unmet(s):
            continue
        L = v.launch(s, cfg.smem_optin_limit("sm_90a"))
        assert L.extended and [t[0] for t in L.tma] == ["A", "B"]
        assert all(g % c == 0 for g, c in zip(L.grid, L.cluster, strict=True))
        assert math.prod(L.block) % 128 == 0  # whole warpgroups
        tiles_m, tiles_n = -(-s["M"] // 128), -(-s["N"] // v.defines.get("BN", 128))
        if vid in ("06_wgmma_tma", "07_warp_specialized"):
            assert (L.grid[0], L.grid[1]) == (tiles_n, tiles_m)
        else:  # persistent: at most one block per SM, never more blocks than tiles
            assert L.grid[0] <= 132 and L.grid[0] <= L.cluster[0] * tiles_m * tiles_n
        # the smem the kernel carves: STAGES rings of A and B tiles, plus 1 KiB of alignment
        rows_b = v.defines.get("BN", 128)
        rows_a = v.defines.get("BM", 128)
        assert L.smem == v.defines["STAGES"] * (rows_a + rows_b) * 128 + 1024
        # the B tile a block receives per stage is whole: its part times the cluster size
        assert dict((t[0], t[1]) for t in L.tma)["B"] * L.cluster[0] == rows_b


def test_odd_shapes_are_handled_and_k_rows_must_be_16_byte_multiples():
    v = HGEMM.variant("09_cluster_multicast")
    assert v.unmet({"M": 4095, "N": 4097, "K": 1000}) == []
    assert v.unmet({"M": 64, "N": 64, "K": 1001}) == ["K % 8 == 0"]


# ------------------------------------------------------------------------------------------
# errors of the new keys name the study file and the variant


def _study(tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load((REPO / "config" / "studies" / "hgemm.yaml").read_text())
    data["variants"] = [v for v in data["variants"] if v["id"] == "09_cluster_multicast"]
    data["variants"][0].pop("claims")  # against the step before it, which is left out here
    data["variants"][0].update(changes)
    root = tmp_path / "repo"
    (root / "config" / "studies").mkdir(parents=True)
    (root / "kernels").symlink_to(REPO / "kernels")
    path = root / "config" / "studies" / "hgemm.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _load(path: Path):
    return cfg.load_study(path, PROJECT.settings, path.parents[2])


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"tma": {"A": {"box": [128, 128], "swizzle": 128}, "B": {"box": [128, 64]}}},
            "256 bytes, wider than the 128-byte swizzle",
        ),
        ({"tma": {"D": {"box": [128, 64]}}}, "has no matrix 'D'"),
        ({"tma": {"A": {"box": [512, 64]}, "B": {"box": [128, 64]}}}, "outside 1..256"),
        ({"tma": {"A": {"box": [128, 4]}, "B": {"box": [128, 64]}}}, "not a multiple of 16"),
        ({"tma": {"A": {"box": [128, "BQ"]}}}, "unknown name(s) BQ"),
        ({"cluster": [3]}, "is not a multiple of cluster [3, 1, 1]"),
        ({"cluster": [16]}, "has 16 blocks"),
        ({"cluster": ["cdiv(CLUSTER_M, 1"]}, "quote each one"),
        ({"arch": "sm_80"}, "needs sm_90 or later"),
        ({"arch": "90a"}, "does not match"),
        ({"requires": ["SM_COUNT >= 100"]}, "unknown name(s) SM_COUNT"),
        ({"block": ["SM_COUNT"]}, "unknown name(s) SM_COUNT"),
        ({"defines": {"CLUSTER_M": 2, "SM_COUNT": 114}}, "SM_COUNT is the device's SM count"),
    ],
)
def test_cluster_and_tma_errors_name_the_variant(tmp_path, changes, message):
    path = _study(tmp_path, **changes)
    with pytest.raises(cfg.ConfigError) as e:
        _load(path)
    text = str(e.value)
    assert "09_cluster_multicast" in text and "hgemm.yaml" in text, text
    assert message in text, text


@pytest.mark.parametrize("vid", ["08_persistent", "09_cluster_multicast"])
def test_persistent_grids_follow_the_device_s_sm_count(vid):
    """One block per SM of the GPU the job runs on (its SM_COUNT), whole clusters; without a
    device the nominal 132. Small problems get one block per tile, whatever the SM count."""
    v = HGEMM.variant(vid)
    big, small = {"M": 8192, "N": 8192, "K": 512}, {"M": 512, "N": 512, "K": 512}
    assert v.launch(big).grid[0] == v.launch(big, sm_count=cfg.NOMINAL_SM_COUNT).grid[0] == 132
    assert v.launch(big, sm_count=114).grid[0] == 114  # an H100 PCIe
    assert v.launch(big, sm_count=115).grid[0] == (115 if v.cluster == () else 114)
    tiles = (512 // 128) * (512 // v.defines["BN"])
    assert v.launch(small, sm_count=114).grid[0] == tiles
    assert v.launch(small, sm_count=4).grid[0] == 4  # fewer SMs than tiles: one block each


def test_spec_includes_arch_cluster_and_tma(tmp_path):
    base = _load(_study(tmp_path)).variant("09_cluster_multicast")
    other = _load(_study(tmp_path / "b", cluster=[1])).variant("09_cluster_multicast")
    assert base.spec()["arch"] == "sm_90a" and base.spec()["cluster"] == ["CLUSTER_M"]
    assert base.spec_sha256() != other.spec_sha256()


# ------------------------------------------------------------------------------------------
# the extended launch's parameter block, as the driver reads it


def test_pack_params_layout():
    tmap = bytes(range(128))
    args = (np.int32(7), np.int32(-3), np.int32(1 << 20))
    addr, keep = launch.pack_params(args, [tmap, tmap[::-1]])
    ptrs = (ctypes.c_void_p * 5).from_address(addr)
    assert [ctypes.c_int32.from_address(ptrs[i]).value for i in range(3)] == [7, -3, 1 << 20]
    assert ctypes.string_at(ptrs[3], 128) == tmap
    assert ctypes.string_at(ptrs[4], 128) == tmap[::-1]
    assert all(p % 64 == 0 for p in ptrs)
    with pytest.raises(TypeError):
        launch.pack_params(("x",), [])


# ------------------------------------------------------------------------------------------
# nvcc: the Hopper instructions of each step, no spills


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    out = tmp_path_factory.mktemp("hgemm-cubins")

    def one(vid):
        v = HGEMM.variant(vid)
        return vid, build.compile_variant(v, ARCH, FLAGS, REPO, out / vid / "kernel.cubin")

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, SM90A + CANDIDATES))


@pytest.mark.parametrize("vid", SM90A + CANDIDATES)
def test_sm90a_kernels_compile_with_hopper_instructions(built, vid):
    res = built[vid]
    v = HGEMM.variant(vid)
    assert "-gencode=arch=compute_90a,code=sm_90a" in res.command
    r = res.resources
    assert r.function == v.entry
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0 and r.stack_bytes == 0, res.log
    assert "C7515" not in res.log, "ptxas serialised the wgmmas"  # noqa: S101
    assert "C7508" not in res.log, "ptxas ignored setmaxnreg"
    ops = set(res.sass)
    assert not {op for op in ops if op.split(".")[0] in ("LDL", "STL", "HMMA")}
    want = (
        EXPECTED_SASS.get(vid)
        or EXPECTED_SASS[
            "09_cluster_multicast" if v.tune_point.get("CLUSTER_M", 1) > 1 else "08_persistent"
        ]
    )
    for prefix in want:
        assert any(op.startswith(prefix) for op in ops), (prefix, sorted(ops))
    # one wgmma m64nBNk16 per 16-wide K slice of the 64-wide tile, for the variant's BN
    bn = v.defines.get("BN", 128)
    hgmma = [op for op in ops if op.startswith("HGMMA")]
    assert hgmma and sum(res.sass[op] for op in hgmma) == 4, res.sass
    assert r.registers <= 65536 // math.prod(v.launch(HGEMM.headline).block)
    assert bn in (128, 256)


# ------------------------------------------------------------------------------------------
# the roofline of a tensor-core problem: model FLOPs, the BF16 tensor roof, tensor columns


def test_tensor_core_roofline_uses_model_flops_and_the_bf16_peak():
    import pandas as pd

    mnk = 4096**3
    metrics = {
        "gpu__time_duration.sum": 0.25e6,  # 0.25 ms
        "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": 0.0,
        "sm__inst_executed_pipe_tensor_op_gmma.sum": 1e6,
        "sm__inst_executed_pipe_tensor_op_hmma.sum": 0.0,
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active": 71.5,
        "dram__bytes_read.sum": 1e8,
        "dram__bytes_write.sum": 3e7,
        "lts__t_bytes.sum": 2e9,
        "l1tex__t_bytes.sum": 1e9,
        "sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum": 0.0,
    }
    rows = pd.DataFrame(
        [
            {
                "study": "hgemm",
                "variant": "06_wgmma_tma",
                "M": 4096,
                "N": 4096,
                "K": 4096,
                "size": "4096x4096x4096",
                "metric": k,
                "value": v,
                "gpu_name": "G",
                "gpu_uuid": "U",
            }
            for k, v in metrics.items()
        ]
    )
    # a compute roof of 60 TFLOP/s (FP32) would call 550 TFLOP/s compute-bound at any
    # intensity; against the 990 TFLOP/s BF16 roof and a 1 TB/s L1 the L1 roof is lower
    device = pd.DataFrame(
        {
            "quantity": ["copy_gbps", "l2_gbps", "l1_gbps", "fp32_peak_tflops"]
            + ["bf16_tensor_peak_tflops"],
            "value": [4800.0, 10000.0, 1000.0, 60.0, 990.0],
        }
    )
    p = problems.get("hgemm")
    r = roofline.roofline(rows, None, device, p.size_names, p.flops, tensor_flops=True).iloc[0]
    assert r["flop"] == 2 * mnk
    assert r["tflops"] == pytest.approx(2 * mnk / 0.25e-3 / 1e12)
    assert r["tensor_pipe_pct"] == 71.5
    assert r["hgmma_inst"] == 1e6 and r["hmma_inst"] == 0
    assert r["smem_bank_conflicts_ldsm"] == 0
    assert r["bound"] == "l1"  # L1: 1000 GB/s x 137 FLOP/B = 137 TFLOP/s < 990
    plain = roofline.roofline(rows, None, device, p.size_names, p.flops).iloc[0]
    assert plain["flop"] == 0 and plain["bound"] is None  # FP counters alone see nothing
    # a SIMT step: its FFMAs are counted, and not counted twice
    ffma = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
    simt = rows.assign(value=rows["value"].where(rows["metric"] != ffma, float(mnk)))
    r = roofline.roofline(simt, None, device, p.size_names, p.flops, tensor_flops=True).iloc[0]
    assert r["flop"] == 2 * mnk


def test_roofline_figure_draws_the_bf16_tensor_roof(tmp_path):
    import pandas as pd

    from kernelbook.report import figures

    roof = pd.DataFrame(
        [
            {
                "variant": v,
                "tflops": t,
                "ai_dram": 600.0,
                "ai_l2": 120.0,
                "ai_l1": 60.0,
                "flop": 1e12,
            }
            for v, t in (("06_wgmma_tma", 420.0), ("09_cluster_multicast", 610.0))
        ]
    )
    device = pd.DataFrame(
        {
            "quantity": ["copy_gbps", "l2_gbps", "bf16_tensor_peak_tflops", "cublas_bf16_tflops"],
            "value": [4300.0, 9000.0, 1070.0, 668.0],
        }
    )
    figures.roofline(
        roof,
        ["06_wgmma_tma", "09_cluster_multicast"],
        tmp_path,
        ceil=figures.ceilings(device),
        size_label="4096x4096x4096",
        peak_kind="bf16_tensor",
    )
    assert list(tmp_path.glob("roofline*")), list(tmp_path.iterdir())
    with pytest.raises(figures.NoData, match="no compute peak"):
        figures.roofline(
            roof,
            ["06_wgmma_tma"],
            tmp_path,
            ceil=figures.ceilings(device),
            size_label="4096x4096x4096",
        )


def test_second_headline_must_be_a_study_size_and_gets_its_own_ladder(tmp_path):
    import pandas as pd

    from kernelbook.report import figures

    path = _study(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["second_headline"] = {"M": 8000, "N": 8192, "K": 8192}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(cfg.ConfigError, match="second_headline .* is not one of the study's"):
        _load(path)
    rows = pd.DataFrame(
        [
            {"variant": "06_wgmma_tma", "status": "ok", "pct_of_baseline": 61.0},
            {"variant": "09_cluster_multicast", "status": "ok", "pct_of_baseline": 93.0},
        ]
    ).set_index("variant", drop=False)
    figures.ladder(
        rows,
        list(rows.index),
        tmp_path,
        size_label="8192x8192x8192",
        baseline_label="cuBLAS",
        name="ladder_8192x8192x8192",
    )
    assert list(tmp_path.glob("ladder_8192x8192x8192*"))
