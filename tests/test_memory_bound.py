"""The memory-bound studies (transpose, softmax, softmax_bf16) without a GPU.

Real parts only: the problem modules (imported with neither CuPy nor PyTorch), their cost
models, the correctness check run on NumPy arrays (the check is written against an array
module; NumPy stands in for CuPy), the study configs as the pipeline resolves them, and every
variant compiled by the real nvcc with its ptxas report and SASS read back.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, kernelbook_cli, planned_jobs, snakemake
from cuda_emu import BF16, EMU

from kernelbook import config as cfg
from kernelbook import problems
from kernelbook.build import nvcc as build
from kernelbook.build.nvcc import CompileError
from kernelbook.problems.base import (
    GUARD_BYTE,
    InputModified,
    NonFinite,
    OutOfBounds,
    WrongResult,
)
from kernelbook.problems.bf16 import BF16_NAN, bf16_bits, bf16_values
from kernelbook.problems.softmax import softmax64

STUDIES = ("transpose", "softmax", "softmax_bf16")
ARCH = "sm_90"
FLAGS = ["-O3", "-lineinfo"]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


@pytest.fixture(scope="module")
def project():
    return cfg.load_project_file(
        REPO / "config" / "config.yaml", overrides={"studies": list(STUDIES)}
    )


@pytest.fixture(scope="module")
def transpose(project):
    return project.study("transpose")


@pytest.fixture(scope="module")
def softmax(project):
    return project.study("softmax")


@pytest.fixture(scope="module")
def softmax_bf16(project):
    return project.study("softmax_bf16")


@pytest.fixture
def numpy_as_cupy(monkeypatch):
    """Problem.check imports cupy inside; let it find NumPy, whose API it uses."""
    monkeypatch.setitem(sys.modules, "cupy", np)
    return np


# ------------------------------------------------------------------------------------------
# The problems: import, registry, cost models


def test_problems_import_without_cupy_or_torch():
    code = (
        "import sys\n"
        "from kernelbook import problems\n"
        "assert {'transpose', 'softmax'} <= set(problems.names()), problems.names()\n"
        "print(sorted(m for m in ('cupy', 'torch') if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_registry():
    t, s = problems.get("transpose"), problems.get("softmax")
    assert t.name == "transpose" and s.name == "softmax"
    assert t.size_names == ("M", "N") and s.size_names == ("R", "N")
    assert t.dtypes == ("float32",)
    assert set(s.dtypes) == {"float32", "bfloat16"}
    assert t.figure_of_merit == s.figure_of_merit == "gbps"
    assert set(t.baselines) == {"torch"} and set(s.baselines) == {"torch"}
    assert set(t.alternatives) == {"copy"} and s.alternatives == {}
    assert t.default_params == {} and s.default_params == {}


def test_transpose_cost_model():
    t = problems.get("transpose")
    s = {"M": 1000, "N": 3000}
    assert t.flops(s) == 0
    assert t.min_bytes(s, "float32") == 2 * 1000 * 3000 * 4 == 24_000_000
    assert t.min_bytes({"M": 16384, "N": 16384}, "float32") == 2 * 2**30  # 2 GiB
    assert t.tolerance(s, "float32") == 0.0  # a transpose moves bits: exact


def test_softmax_cost_model():
    s = problems.get("softmax")
    long = {"R": 4096, "N": 65536}
    assert s.min_bytes(long, "float32") == 2 * 4096 * 65536 * 4 == 2 * 2**30
    assert s.min_bytes(long, "bfloat16") == 2**30
    assert s.flops({"R": 3, "N": 7}) == 5 * 21
    # float32: 1e-5 up to N = 1024, then growing like sqrt(N) (a sequential row sum)
    assert s.tolerance({"R": 4096, "N": 128}, "float32") == pytest.approx(1e-5)
    assert s.tolerance({"R": 4096, "N": 1024}, "float32") == pytest.approx(1e-5)
    assert s.tolerance(long, "float32") == pytest.approx(8e-5)
    assert s.tolerance({"R": 333, "N": 4099}, "float32") == pytest.approx(
        1e-5 * math.sqrt(4099 / 1024)
    )
    assert s.tolerance(long, "bfloat16") == 1e-2


def test_parse_size_and_label():
    t, s = problems.get("transpose"), problems.get("softmax")
    assert t.parse_size("1000x3000") == {"M": 1000, "N": 3000}
    assert t.parse_size("4096") == {"M": 4096, "N": 4096}
    assert t.parse_size("N=5,M=7") == {"M": 7, "N": 5}
    assert s.parse_size("333x4099") == {"R": 333, "N": 4099}
    assert s.parse_size("R=4096,N=65536") == {"R": 4096, "N": 65536}
    assert t.label({"M": 4097, "N": 4095}) == "4097x4095"
    assert s.label({"R": 333, "N": 4099}) == "333x4099"
    for bad in ("1x2x3", "0x5", "Kx5", "M=1,K=2"):
        with pytest.raises(ValueError):
            t.parse_size(bad)
    with pytest.raises(ValueError, match="R, N"):
        s.parse_size("M=1,N=2")


# ------------------------------------------------------------------------------------------
# bfloat16 without a bfloat16 array type


def test_bf16_rounding_is_round_to_nearest_even():
    one = 0x3F80  # bf16 bits of 1.0
    ulp = 2.0**-7  # bf16 spacing just above 1
    values = np.array(
        [1.0, 1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp / 2 + 2**-20, -1.0, -2.5, 3.0e-39, 1e30],
        dtype=np.float32,
    )
    bits = bf16_bits(np, values)
    assert bits.dtype == np.uint16
    assert bits[0] == one
    assert bits[1] == one  # a tie goes to the even mantissa (1.0)
    assert bits[2] == one + 2  # a tie goes to the even mantissa (1 + 2 ulp)
    assert bits[3] == one + 1  # above the tie: up
    assert bits[4] == 0xBF80 and bits[5] == 0xC020
    back = bf16_values(np, bits)
    assert back.dtype == np.float32
    assert back[0] == 1.0 and back[5] == -2.5
    # bf16 -> float32 -> bf16 is the identity
    allbits = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16)
    finite = np.isfinite(bf16_values(np, allbits))
    assert (bf16_bits(np, bf16_values(np, allbits[finite])) == allbits[finite]).all()


def test_bf16_rounding_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal(100_000).astype(np.float32) * 10
    ours = bf16_bits(np, x)
    theirs = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert (ours == theirs).all()


def test_softmax64_reference():
    x = np.random.default_rng(2).standard_normal((5, 37)).astype(np.float32)
    ref = softmax64(np, x).reshape(5, 37)
    assert ref.dtype == np.float64
    assert np.allclose(ref.sum(axis=1), 1.0, rtol=0, atol=1e-14)
    e = np.exp(x.astype(np.float64))
    assert np.allclose(ref, e / e.sum(axis=1, keepdims=True), rtol=1e-14, atol=0)
    # shift-invariant, so large inputs do not overflow
    shifted = softmax64(np, (x + np.float32(500)).astype(np.float32))
    assert np.isfinite(shifted).all()
    assert np.allclose(shifted, ref.ravel(), rtol=1e-3)  # x + 500 is rounded in float32


# ------------------------------------------------------------------------------------------
# The check, on NumPy arrays


def _transpose_case(computes=None, M=37, N=45, guard=64):
    x = np.random.default_rng(3).standard_normal((M, N)).astype(np.float32)
    case = problems.get("transpose").build_case(
        np, {"M": M, "N": N}, "float32", 7, x, guard=guard, computes=computes
    )
    return case, x


def test_transpose_case_layout():
    case, x = _transpose_case()
    out = case.outputs["out"]
    assert out.view.shape == (37 * 45,) and out.view.dtype == np.float32
    assert np.isnan(out.view).all()  # poisoned before a launch
    assert (out.full[: out.guard].view(np.uint8) == GUARD_BYTE).all()
    M, N, xin, view = case.args
    assert (int(M), int(N)) == (37, 45) and M.dtype == np.int32
    assert xin is x and view is out.view
    assert np.array_equal(case.reference["out"], x.T.astype(np.float64).ravel())
    copy, _ = _transpose_case("copy")
    assert np.array_equal(copy.reference["out"], x.astype(np.float64).ravel())
    with pytest.raises(KeyError, match="no alternative 'rotate'"):
        _transpose_case("rotate")


def test_transpose_check_is_exact(numpy_as_cupy):
    t = problems.get("transpose")
    tol = t.tolerance({"M": 37, "N": 45}, "float32")
    case, x = _transpose_case()
    case.outputs["out"].view[:] = x.T.ravel()
    r = t.check(case, tol, "transpose/test at M=37 N=45")
    assert r.rel_err == 0.0 and r.max_err == 0.0

    one_ulp = case.outputs["out"].view
    one_ulp[100] = np.nextafter(one_ulp[100], np.float32(np.inf))
    with pytest.raises(WrongResult, match="transpose/test at M=37 N=45: relative error"):
        t.check(case, tol, "transpose/test at M=37 N=45")

    case.outputs["out"].view[:] = x.ravel()  # a copy, not a transpose
    with pytest.raises(WrongResult):
        t.check(case, tol, "w")

    case.reset()
    case.outputs["out"].view[:-1] = x.T.ravel()[:-1]  # last element unwritten: NaN
    with pytest.raises(NonFinite, match="1 of 1665 element"):
        t.check(case, tol, "w")


def test_transpose_check_catches_guard_writes_and_input_changes(numpy_as_cupy):
    t = problems.get("transpose")
    case, x = _transpose_case()
    case.outputs["out"].view[:] = x.T.ravel()
    case.outputs["out"].full[-1] = 0.0  # past the end, inside the guard band
    with pytest.raises(OutOfBounds, match="wrote outside out: 0 .* before it and 1 after it"):
        t.check(case, 0.0, "w")

    case, x = _transpose_case()
    case.outputs["out"].view[:] = x.T.ravel()
    x[0, 0] += 1
    with pytest.raises(InputModified, match="wrote 1 element"):
        t.check(case, 0.0, "w")


def test_transpose_copy_alternative_checked_against_the_copy(numpy_as_cupy):
    t = problems.get("transpose")
    case, x = _transpose_case("copy")
    case.outputs["out"].view[:] = x.ravel()
    assert t.check(case, 0.0, "w").rel_err == 0.0


def _softmax_case(dtype, R=6, N=70, guard=64):
    xf = np.random.default_rng(4).standard_normal((R, N)).astype(np.float32)
    case = problems.get("softmax").build_case(np, {"R": R, "N": N}, dtype, 7, xf, guard=guard)
    return case, xf


def test_softmax_bf16_case_layout():
    case, xf = _softmax_case("bfloat16")
    x, y = case.inputs["x"], case.outputs["y"]
    assert x.dtype == np.uint16 and x.shape == (6, 70)
    assert np.array_equal(x, bf16_bits(np, xf))
    assert y.view.dtype == np.uint16 and (y.view == BF16_NAN).all()  # bf16 NaN poison
    # the reference is the softmax of the rounded values the kernel reads
    assert np.array_equal(case.reference["y"], softmax64(np, bf16_values(np, x)))
    assert not np.array_equal(case.reference["y"], softmax64(np, xf))
    R, N, xin, view = case.args
    assert (int(R), int(N)) == (6, 70) and xin is x and view is y.view
    f32, _ = _softmax_case("float32")
    assert f32.outputs["y"].view.dtype == np.float32 and np.isnan(f32.outputs["y"].view).all()
    with pytest.raises(KeyError, match="no alternative"):
        problems.get("softmax").build_case(np, {"R": 1, "N": 1}, "float32", 0, xf, computes="x")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_softmax_check(numpy_as_cupy, dtype):
    s = problems.get("softmax")
    sizes = {"R": 6, "N": 70}
    tol = s.tolerance(sizes, dtype)
    case, _ = _softmax_case(dtype)
    ref = case.reference["y"]
    y = case.outputs["y"].view
    if dtype == "bfloat16":
        y[:] = bf16_bits(np, ref.astype(np.float32))  # the best a bf16 kernel can do
    else:
        y[:] = ref.astype(np.float32)
    r = s.check(case, tol, "softmax/test")
    assert 0 < r.rel_err < (3e-3 if dtype == "bfloat16" else 1e-7)

    y[5] = y[6]  # one element wrong
    y[:70] = y[70:140]  # and a whole row taken from the next one
    with pytest.raises(WrongResult, match="softmax/test: relative error"):
        s.check(case, tol, "softmax/test")

    case.reset()  # nothing written: every element is NaN (bf16 NaN bits decode to NaN)
    with pytest.raises(NonFinite, match=f"{6 * 70} of {6 * 70} element"):
        s.check(case, tol, "softmax/test")


def test_softmax_bf16_guard_band(numpy_as_cupy):
    s = problems.get("softmax")
    case, _ = _softmax_case("bfloat16")
    case.outputs["y"].view[:] = bf16_bits(np, case.reference["y"].astype(np.float32))
    case.outputs["y"].full[0] = 0  # one bf16 element before y
    with pytest.raises(OutOfBounds, match="1 element.* before it and 0 after it"):
        s.check(case, 1e-2, "w")


@pytest.mark.parametrize("computes", [None, "copy"])
def test_transpose_baseline_logic(cpu_torch, computes):
    t = problems.get("transpose")
    case, x = _transpose_case(computes)
    base = t.baseline(case, "torch", {})
    # checked against the transpose itself, also when the case holds the copy's reference
    assert base.rel_err == 0.0
    assert base.mode == f"torch {cpu_torch.__version__} out.copy_(x.t()), float32"
    base.run()
    with pytest.raises(KeyError, match="no baseline 'cublas'"):
        t.baseline(case, "cublas", {})


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_softmax_baseline_logic(cpu_torch, dtype):
    s = problems.get("softmax")
    case, _ = _softmax_case(dtype)
    base = s.baseline(case, "torch", {})
    assert 0 < base.rel_err < (3e-3 if dtype == "bfloat16" else 1e-6)
    assert base.mode.endswith(f"torch.softmax(x, dim=-1, out=y), {dtype}")
    base.run()


# ------------------------------------------------------------------------------------------
# The study configs


def test_transpose_study(transpose):
    t = transpose
    assert t.problem == "transpose" and t.dtype == "float32" and t.baseline == "torch"
    squares = [{"M": m, "N": m} for m in (1024, 2048, 4096, 8192, 16384)]
    assert list(t.sizes) == [*squares, {"M": 1000, "N": 3000}, {"M": 4097, "N": 4095}]
    assert t.headline == {"M": 16384, "N": 16384}
    assert t.profile_sizes == ({"M": 16384, "N": 16384},)
    ids = [v.id for v in t.variants]
    assert ids == [
        "00_copy",
        "01_naive",
        "02_smem_tiled",
        "03_smem_padded",
        "04_multi_element",
        "05_vectorized",
        "06_tuned",
    ]
    for v in t.variants:
        src = "05_vectorized" if v.id == "06_tuned" else v.id  # 06 tunes 05's kernel
        assert v.source == f"kernels/transpose/{src}.cu"
        assert "pct_of_copy" in v.predict and "pct_of_baseline" in v.predict
        assert v.says
    # sanitize at the smallest size every variant runs (flops are 0: the first listed)
    assert all(t.sanitize_size_for(v) == {"M": 1024, "N": 1024} for v in t.variants)
    # 06: TILE x THREADS with 1-4 float4 a thread, each with and without streaming hints
    tuned = t.variant("06_tuned")
    points = sorted((c.tune_point["TILE"], c.tune_point["THREADS"]) for c in t.candidates)
    assert points == sorted(2 * [(32, 128), (32, 256), (64, 256), (64, 512)])
    assert len(tuned.candidates) == 8 and all(c.tuned_from == "06_tuned" for c in t.candidates)
    assert tuned.tune_sizes == ({"M": 16384, "N": 16384}, {"M": 8192, "N": 8192})


def test_transpose_copy_variant_computes_copy(transpose):
    copy = transpose.variant("00_copy")
    assert copy.computes == "copy"
    assert copy.spec()["computes"] == "copy"
    assert all(v.computes is None for v in transpose.variants[1:])
    assert "computes" not in transpose.variant("01_naive").spec()
    # computes is part of what defines the variant's jobs
    assert copy.spec_sha256() != dataclasses.replace(copy, computes=None).spec_sha256()


def test_transpose_requires(transpose):
    vec = transpose.variant("05_vectorized")
    assert vec.unmet({"M": 4097, "N": 4095}) == ["M % 4 == 0", "N % 4 == 0"]
    assert vec.unmet({"M": 1000, "N": 3000}) == []
    for v in transpose.variants:
        if v.id not in ("05_vectorized", "06_tuned"):
            assert all(not v.unmet(s) for s in transpose.sizes), v.id
    assert transpose.variant("06_tuned").requires == vec.requires


TILED = ["01_naive", "02_smem_tiled", "04_multi_element", "05_vectorized"]
TILED += ["06_tuned__TILE32_THREADS128_STREAM0", "06_tuned__TILE64_THREADS512_STREAM1"]


@pytest.mark.parametrize("vid", TILED)
def test_transpose_grids_cover_the_matrix(transpose, vid):
    v = transpose.variant(vid)
    tile_x, tile_y = {
        "01_naive": (32, 8),
        "02_smem_tiled": (32, 32),
        "04_multi_element": (32, 32),
        "05_vectorized": (32, 32),
        "06_tuned__TILE32_THREADS128_STREAM0": (32, 32),
        "06_tuned__TILE64_THREADS512_STREAM1": (64, 64),
    }[vid]
    for s in transpose.sizes:
        if v.unmet(s):
            continue
        launch = v.launch(s)
        assert launch.grid[0] * tile_x >= s["N"] > (launch.grid[0] - 1) * tile_x
        assert launch.grid[1] * tile_y >= s["M"] > (launch.grid[1] - 1) * tile_y
        assert launch.grid[1] <= 65535 and launch.smem == 0


def test_copy_grid_covers_every_element(transpose):
    v = transpose.variant("00_copy")
    for s in transpose.sizes:
        grid = v.launch(s).grid[0]
        per_block = 4 * 256 * 4  # BLOCK float4 x UNROLL
        assert (grid - 1) * per_block < s["M"] * s["N"] <= grid * per_block


@pytest.mark.parametrize("study", ["softmax", "softmax_bf16"])
def test_softmax_studies(project, study):
    s = project.study(study)
    dtype = "float32" if study == "softmax" else "bfloat16"
    assert s.problem == "softmax" and s.dtype == dtype and s.baseline == "torch"
    assert list(s.sizes) == [
        *({"R": 4096, "N": n} for n in (128, 512, 1024, 4096, 16384, 65536)),
        {"R": 4096, "N": 1000},
        {"R": 333, "N": 4099},
    ]
    assert s.headline == {"R": 4096, "N": 65536}
    assert s.profile_sizes == ({"R": 4096, "N": 16384}, {"R": 4096, "N": 65536})
    assert [v.id for v in s.variants] == [
        "01_three_pass",
        "02_fused_block",
        "03_warp_shuffle",
        "04_online",
        "05_online_vectorized",
        "06_online_tuned",
        "07_triton",
    ]
    flag = "DTYPE_F32" if dtype == "float32" else "DTYPE_BF16"
    other = "DTYPE_BF16" if dtype == "float32" else "DTYPE_F32"
    for v in (*s.variants, *s.candidates):
        if v.kind == "triton":  # the dtype is the Triton kernel's argument types
            assert v.source == "kernels/softmax/07_triton.py"
            continue
        src = "05_online_vectorized" if v.id.startswith("06") else v.id  # 06 tunes 05
        assert v.source == f"kernels/softmax/{src}.cu"  # one source for both dtypes
        assert v.defines[flag] == 1 and other not in v.defines
        assert "pct_of_copy" in v.predict
    vec = s.variant("05_online_vectorized")
    assert vec.defines["VEC"] * (4 if dtype == "float32" else 2) == 16
    assert vec.defines["EPT"] == 4 * vec.defines["VEC"]
    assert vec.unmet({"R": 333, "N": 4099}) == ["N % VEC == 0"]
    assert vec.unmet({"R": 4096, "N": 1000}) == []
    # 06: 3 chunk depths x 3 row widths, VEC as 05's; EPT sets 1024, 512 or 256 threads a
    # row at N = 65536
    tuned = s.variant("06_online_tuned")
    assert len(tuned.candidates) == 9 and tuned.requires == vec.requires
    widths = set()
    for c in (c for c in s.candidates if c.tuned_from == "06_online_tuned"):
        assert c.defines["VEC"] == vec.defines["VEC"] and c.tune_point["CACHE"] in (2, 4, 8)
        widths.add(c.launch({"R": 4096, "N": 65536}).block[:2])
    assert widths == {(1024, 1), (512, 1), (256, 1)}
    # sanitize at the smallest size (by the problem's cost): 4096 x 128
    assert all(s.sanitize_size_for(v) == {"R": 4096, "N": 128} for v in s.variants)


@pytest.mark.parametrize("study", ["softmax", "softmax_bf16"])
def test_softmax_geometry(project, study):
    """Row groups: GX threads per row (a multiple of 32, at most 1024), GY rows per block."""
    s = project.study(study)
    seen = {}
    for v in (*s.variants[1:], *s.candidates):
        for size in s.sizes:
            if v.unmet(size):
                continue
            gx, gy, gz = v.launch(size).block
            (grid, g1, g2) = v.launch(size).grid
            assert gx % 32 == 0 and 32 <= gx <= 1024 and gz == 1, (v.id, size)
            assert gx * gy <= 1024
            assert grid * gy >= size["R"] > (grid - 1) * gy, (v.id, size)
            assert g1 == g2 == 1
            seen[(v.id, size["N"])] = (gx, gy)
    assert seen[("03_warp_shuffle", 128)] == (32, 8)  # a warp per row, 8 rows per block
    assert seen[("03_warp_shuffle", 65536)] == (1024, 1)
    assert seen[("02_fused_block", 4099)] == (544, 1)  # not a power of two: the tree folds it
    # 05 keeps the row in registers (one chunk of CACHE vectors per thread) at every study
    # shape but float32 at N = 65536, as its header says
    vec = s.variant("05_online_vectorized")
    for size in s.sizes:
        if vec.unmet(size):
            continue
        gx = vec.launch(size).block[0]
        cached = size["N"] // vec.defines["VEC"] <= vec.defines["CACHE"] * gx
        assert cached == (study == "softmax_bf16" or size["N"] < 65536), size


def test_cli_lists_the_transpose_study():
    proc = kernelbook_cli(REPO, "--settings", '{"studies": ["transpose"]}', "list", "transpose")
    assert proc.returncode == 0, proc.stderr
    assert "transpose: transpose float32, baseline torch, 7 sizes" in proc.stdout
    assert "00_copy" in proc.stdout and "transpose_vec4" in proc.stdout


def _study_copy(tmp_path: Path, name: str, edit) -> Path:
    root = tmp_path / "repo"
    (root / "config" / "studies").mkdir(parents=True)
    shutil.copytree(REPO / "kernels", root / "kernels")
    path = root / "config" / "studies" / f"{name}.yaml"
    path.write_text(edit((REPO / "config" / "studies" / f"{name}.yaml").read_text()))
    return path


def test_broken_computes_names_the_variant(tmp_path, project):
    path = _study_copy(
        tmp_path, "transpose", lambda t: t.replace("computes: copy", "computes: cpy")
    )
    with pytest.raises(cfg.ConfigError) as e:
        cfg.load_study(path, project.settings, path.parents[2])
    msg = str(e.value)
    assert msg.startswith("config/studies/transpose.yaml: variants[0] (00_copy): computes:")
    assert "offers no 'cpy'" in msg and "offered: copy" in msg


def test_computes_on_a_problem_without_alternatives(tmp_path, project):
    path = _study_copy(
        tmp_path,
        "softmax",
        lambda t: t.replace(
            "entry: softmax_online\n", "entry: softmax_online\n    computes: copy\n"
        ),
    )
    with pytest.raises(cfg.ConfigError, match=r"variants\[3\] \(04_online\): computes: .*none"):
        cfg.load_study(path, project.settings, path.parents[2])


def test_softmax_study_with_unsupported_dtype(tmp_path, project):
    path = _study_copy(tmp_path, "softmax", lambda t: t.replace("dtype: float32", "dtype: float16"))
    with pytest.raises(cfg.ConfigError, match="supports float32, bfloat16, not float16"):
        cfg.load_study(path, project.settings, path.parents[2])


# ------------------------------------------------------------------------------------------
# Every variant, compiled by the real nvcc


def _candidates(study: str) -> list[tuple[str, str]]:
    """The autotuning candidates the config declares: each compiles and runs as its own job
    (the CUDA C ones: Triton's are compiled by tests/test_kinds.py)."""
    p = cfg.load_project_file(REPO / "config" / "config.yaml", overrides={"studies": [study]})
    return [(study, c.id) for c in p.study(study).candidates if c.kind == "cuda"]


def _triton(study: str) -> list[str]:
    p = cfg.load_project_file(REPO / "config" / "config.yaml", overrides={"studies": [study]})
    return [c.id for c in p.study(study).candidates if c.kind == "triton"]


ALL_VARIANTS = (
    [
        ("transpose", v)
        for v in (
            "00_copy",
            "01_naive",
            "02_smem_tiled",
            "03_smem_padded",
            "04_multi_element",
            "05_vectorized",
        )
    ]
    + _candidates("transpose")
    + [
        (study, v)
        for study in ("softmax", "softmax_bf16")
        for v in (
            "01_three_pass",
            "02_fused_block",
            "03_warp_shuffle",
            "04_online",
            "05_online_vectorized",
        )
    ]
    + _candidates("softmax")
    + _candidates("softmax_bf16")
)

# static shared memory each variant declares (bytes)
SMEM = {
    "00_copy": 0,
    "01_naive": 0,
    "02_smem_tiled": 32 * 32 * 4,
    "03_smem_padded": 32 * 33 * 4,
    "04_multi_element": 32 * 33 * 4,
    "05_vectorized": 32 * 33 * 4,
    "01_three_pass": 0,
    "02_fused_block": 1024 * 4,
    "03_warp_shuffle": 32 * 4,
    "04_online": 2 * 32 * 4,
    "05_online_vectorized": 2 * 32 * 4,
}


def smem_bytes(v) -> int:
    if v.tuned_from == "06_tuned":  # 05's padded tile at the candidate's TILE
        return v.defines["TILE"] * (v.defines["TILE"] + v.defines["PAD"]) * 4
    return SMEM[Path(v.source).stem]  # a softmax 06 candidate declares what 05's source does


@pytest.fixture(scope="module")
def built(project, tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    out = tmp_path_factory.mktemp("mb-cubins")
    results = {}
    for study, vid in ALL_VARIANTS:
        v = project.study(study).variant(vid)
        results[study, vid] = build.compile_variant(
            v, ARCH, FLAGS, REPO, out / study / vid / "kernel.cubin"
        )
    return results


def _global_ops(sass) -> dict[str, int]:
    return {op: n for op, n in sass.items() if op.split(".")[0] in ("LDG", "STG")}


@needs_nvcc
@pytest.mark.parametrize(("study", "vid"), ALL_VARIANTS)
def test_variant_compiles_without_spills(built, project, study, vid):
    res = built[study, vid]
    r = res.resources
    v = project.study(study).variant(vid)
    assert r.function == v.entry
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, res.log
    assert r.stack_bytes == 0
    assert r.smem_static_bytes == smem_bytes(v)
    # a 1024-thread block must fit the register file: 64K registers / 1024 threads
    block_threads = max(
        math.prod(v.launch(s).block) for s in project.study(study).sizes if not v.unmet(s)
    )
    assert 0 < r.registers <= 65536 // block_threads, (r.registers, block_threads)
    assert r.barriers == (0 if vid in ("00_copy", "01_naive", "01_three_pass") else 1)
    ops = {op.split(".")[0] for op in res.sass}
    assert {"LDG", "STG", "EXIT"} <= ops
    assert not ops & {"LDL", "STL"}  # no local memory
    if vid in ("02_smem_tiled", "03_smem_padded", "04_multi_element", "05_vectorized"):
        assert {"LDS", "STS", "BAR"} <= ops
    if vid.startswith("06_tuned"):
        assert {"LDS", "STS", "BAR"} <= ops
        # STREAM=1 marks every global access evict-first; STREAM=0 none
        glob = [op for op in res.sass if op.split(".")[0] in ("LDG", "STG")]
        assert all((".EF" in op) == (v.defines["STREAM"] == 1) for op in glob), glob
    if study.startswith("softmax"):
        assert "MUFU" in ops  # exp2 on the special-function unit


@needs_nvcc
@pytest.mark.parametrize(
    ("study", "vid"),
    [
        ("transpose", "00_copy"),
        ("transpose", "05_vectorized"),
        ("softmax", "05_online_vectorized"),
        ("softmax_bf16", "05_online_vectorized"),
        *(c for c in ALL_VARIANTS if c[1].startswith("06")),
    ],
)
def test_vectorized_variants_use_128_bit_global_accesses(built, study, vid):
    ops = _global_ops(built[study, vid].sass)
    loads = {op for op in ops if op.startswith("LDG")}
    stores = {op for op in ops if op.startswith("STG")}
    assert any(".128" in op for op in loads), ops
    assert any(".128" in op for op in stores), ops
    if vid == "00_copy":
        # the float4 body; the scalar accesses are the M*N % 4 tail
        assert "LDG.E.128.CONSTANT" in ops and "STG.E.128" in ops
    else:
        assert all(".128" in op for op in ops), ops  # nothing narrower


@needs_nvcc
def test_scalar_variants_do_not_vectorize(built):
    for study, vid in ALL_VARIANTS:
        if vid in ("00_copy", "05_vectorized", "05_online_vectorized") or vid.startswith("06"):
            continue
        ops = _global_ops(built[study, vid].sass)
        assert not any(".128" in op for op in ops), (study, vid, ops)
        if study == "softmax_bf16":
            assert any(".U16" in op for op in ops), (vid, ops)  # 2-byte elements


@needs_nvcc
def test_online_variants_use_cache_hints(built):
    # 04 and 05 re-read x as its last use (evict-first) and stream y out: L2 keeps x
    for study in ("softmax", "softmax_bf16"):
        for vid in ("04_online", "05_online_vectorized"):
            ops = _global_ops(built[study, vid].sass)
            assert any(op.startswith("STG.E.EF") for op in ops), ops
            assert all(".EF" in op for op in ops if op.startswith("STG")), ops
            assert any(op.startswith("LDG.E.EF") for op in ops), ops
        ops = _global_ops(built[study, "03_warp_shuffle"].sass)
        assert not any(".EF" in op for op in ops), ops


@needs_nvcc
def test_one_source_two_dtypes(built):
    for vid in ("02_fused_block", "05_online_vectorized"):
        assert built["softmax", vid].sass != built["softmax_bf16", vid].sass
        assert "-DDTYPE_F32=1" in built["softmax", vid].command
        assert "-DDTYPE_BF16=1" in built["softmax_bf16", vid].command


@needs_nvcc
def test_softmax_without_a_dtype_define_does_not_compile(softmax, tmp_path):
    v = softmax.variant("04_online")
    bare = dataclasses.replace(v, defines={k: x for k, x in v.defines.items() if k != "DTYPE_F32"})
    with pytest.raises(CompileError, match="define exactly one of DTYPE_F32 and DTYPE_BF16"):
        build.compile_variant(bare, ARCH, FLAGS, REPO, tmp_path / "k.cubin")
    both = dataclasses.replace(v, defines={**v.defines, "DTYPE_BF16": 1})
    with pytest.raises(CompileError, match="define exactly one"):
        build.compile_variant(both, ARCH, FLAGS, REPO, tmp_path / "k.cubin")


@needs_nvcc
def test_vectorized_transpose_needs_its_defines(transpose, tmp_path):
    v = dataclasses.replace(transpose.variant("05_vectorized"), defines={"TILE": 32, "PAD": 1})
    with pytest.raises(CompileError, match="THREADS must be defined"):
        build.compile_variant(v, ARCH, FLAGS, REPO, tmp_path / "k.cubin")


@needs_nvcc
def test_cli_compiles_a_transpose_variant(tmp_path):
    cubin = tmp_path / "x.cubin"
    proc = kernelbook_cli(
        REPO,
        "--settings",
        '{"studies": ["transpose"]}',
        "compile",
        "transpose",
        "01_naive",
        "--cubin",
        str(cubin),
    )
    assert proc.returncode == 0, proc.stderr
    assert cubin.read_bytes()[:4] == b"\x7fELF"
    assert "transpose/01_naive:" in proc.stderr and "0/0 B spilled" in proc.stderr


@needs_nvcc
def test_dry_run_plans_a_compile_job_per_variant(repo_copy, nogpu_args):
    config = ["studies=[transpose,softmax,softmax_bf16]"] + (["gpu=none"] if nogpu_args else [])
    proc = snakemake(repo_copy, "-n", "all", "--config", *config)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs = planned_jobs(proc.stdout + proc.stderr)
    compiled = sorted((w["study"], w["variant"]) for rule, w in jobs if rule == "compile")
    # without a GPU: every plain variant, and a tuned variant's candidates the published
    # pages show (none published in this copy: its first candidate)
    from kernelbook import tune

    project = cfg.load_project_file(
        repo_copy / "config" / "config.yaml",
        overrides={"studies": ["transpose", "softmax", "softmax_bf16"]},
    )
    expect = [(n, v) for n, st in project.studies.items() for v in tune.jobs_without_gpu(st, [])]
    assert compiled == sorted(expect)
    plain = [(st, v) for st, v in ALL_VARIANTS if "__" not in v]
    assert set(plain) <= set(compiled)


# ------------------------------------------------------------------------------------------
# Every variant run, on the CPU: the kernel sources compiled by g++ against the CUDA emulator
# of tests/cuda_emu.py, on guarded buffers, checked by the problem's own check, at shapes that
# reach each branch.

DRIVER = r"""
#include "emu.h"
#include KFILE
// argv: M N grid.x grid.y block.x block.y in.bin out.bin guard_bytes
int main(int argc, char** argv) {
  const int M = atoi(argv[1]), N = atoi(argv[2]);
  const dim3 grid{(unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]), 1};
  const dim3 block{(unsigned)atoi(argv[5]), (unsigned)atoi(argv[6]), 1};
  const size_t guard = atol(argv[9]);
  std::ifstream fi(argv[7], std::ios::binary | std::ios::ate);
  std::ifstream fo(argv[8], std::ios::binary | std::ios::ate);
  const size_t ni = fi.tellg(), no = fo.tellg();
  char* in = (char*)aligned_alloc(256, (ni / 256 + 1) * 256);
  char* out = (char*)aligned_alloc(256, (no / 256 + 1) * 256);
  fi.seekg(0); fi.read(in, ni); fo.seekg(0); fo.read(out, no);
  emu_launch(grid, block, [=] { KERNEL(M, N, (const ELEM*)in, (ELEM*)(out + guard)); });
  std::ofstream(argv[8], std::ios::binary).write(out, no);
  return 0;
}
"""

EMULATED = {
    "transpose": ["37x45", "64x96", "100x68", "36x100", "33x1", "1x33"],
    "softmax": ["17x128", "3x1000", "2x4099", "2x16384", "1x65536", "2x33000"],
    "softmax_bf16": ["17x128", "3x1000", "2x4099", "2x16384", "1x65536", "2x66000"],
}


@pytest.fixture(scope="module")
def emu_dir(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    d = tmp_path_factory.mktemp("emu")
    (d / "emu.h").write_text(EMU)
    (d / "cuda_bf16.h").write_text(BF16)
    (d / "driver.cpp").write_text(DRIVER)
    return d


@pytest.mark.parametrize(("study", "vid"), ALL_VARIANTS)
def test_variant_runs_correctly_on_the_cpu_emulator(emu_dir, project, numpy_as_cupy, study, vid):
    st = project.study(study)
    v = st.variant(vid)
    prob = problems.get(st.problem)
    exe = emu_dir / f"{study}-{vid}"
    elem = "float" if study == "transpose" else "T"
    cmd = ["g++", "-std=c++20", "-O1", "-pthread", "-w", f"-I{emu_dir}"]
    cmd += [f'-DKFILE="{REPO / v.source}"', f"-DKERNEL={v.entry}", f"-DELEM={elem}"]
    cmd += [f"-D{k}={x}" for k, x in v.defines.items()]
    proc = subprocess.run(
        [*cmd, str(emu_dir / "driver.cpp"), "-o", str(exe)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = 0
    for label in EMULATED[study]:
        sizes = prob.parse_size(label)
        if v.unmet(sizes):
            continue
        a, b = sizes.values()
        values = np.random.default_rng(a * 7919 + b).standard_normal((a, b)).astype(np.float32)
        case = prob.build_case(np, sizes, st.dtype, 0, values, guard=64, computes=v.computes)
        (out,) = case.outputs.values()
        (emu_dir / "in.bin").write_bytes(case.inputs["x"].tobytes())
        (emu_dir / "out.bin").write_bytes(out.full.tobytes())
        launch = v.launch(sizes)
        args = [*map(str, (a, b, *launch.grid[:2], *launch.block[:2]))]
        args += [str(emu_dir / "in.bin"), str(emu_dir / "out.bin")]
        args += [str(out.guard * out.full.dtype.itemsize)]
        proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        out.full[:] = np.frombuffer((emu_dir / "out.bin").read_bytes(), dtype=out.full.dtype)
        tol = prob.tolerance(sizes, st.dtype)
        result = prob.check(case, tol, f"{study}/{vid} at {label} (emulated)")
        assert result.rel_err <= tol
        ran += 1
    assert ran >= 3
