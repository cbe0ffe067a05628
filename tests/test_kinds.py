"""Variant kinds without a GPU: config loading, Triton's ahead-of-time compile for an explicit
target, the build rows of each kind through a real Snakemake run, and the errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import REPO, copy_repo, kernelbook_cli, planned_jobs, snakemake

from kernelbook import config, tables
from kernelbook.build import nvcc as build
from kernelbook.build import triton as kinds
from kernelbook.profile import ncu as profile

pytest.importorskip("triton")

TRITON_GEMM = (REPO / "kernels" / "sgemm" / "14_triton.py").read_text()
TORCH_GEMM = """
import torch


def gemm_eager(case, SCALE=1):
    A, B = case.inputs["A"].view(case.sizes["M"], case.sizes["K"]), case.inputs["B"]
    B = B.view(case.sizes["K"], case.sizes["N"])
    C = case.outputs["C"].view(case.sizes["M"], case.sizes["N"])
    alpha, beta = case.params["alpha"], case.params["beta"]

    def run():
        torch.addmm(C, A, B, beta=beta, alpha=alpha * SCALE, out=C)

    return run
"""
BROKEN_TRITON = TRITON_GEMM.replace("tl.dot(a, b, acc", "tl.dot(a, b, acc, bogus_argument=1")

TRITON_TILE = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 4, "NUM_WARPS": 4}
KINDS_STUDY = {
    "title": "One gemm in three kinds",
    "problem": "gemm",
    "dtype": "float32",
    "params": {"alpha": 1.25, "beta": 0.75},
    "sizes": [{"M": [64], "N": "M", "K": "M"}, {"M": 100, "N": 70, "K": 33}],
    "baseline": "cublas",
    "variants": [
        {
            "id": "01_cuda",
            "entry": "sgemm_naive",
            "defines": {"BS": 32},
            "grid": ["cdiv(M, BS)", "cdiv(N, BS)"],
            "block": ["BS", "BS"],
        },
        {
            "id": "02_triton",
            "kind": "triton",
            "entry": "sgemm_triton",
            "defines": TRITON_TILE,
            "grid": ["cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)"],
        },
        {"id": "03_torch", "kind": "torch", "entry": "gemm_eager", "defines": {"SCALE": 1}},
    ],
}


def kinds_repo(root: Path, broken: bool = False) -> Path:
    """A repository copy whose only study is KINDS_STUDY (with a broken triton variant)."""
    copy_repo(root)
    kdir = root / "kernels" / "kinds"
    kdir.mkdir()
    (kdir / "01_cuda.cu").write_text((REPO / "kernels" / "sgemm" / "01_naive.cu").read_text())
    (kdir / "02_triton.py").write_text(TRITON_GEMM)
    (kdir / "03_torch.py").write_text(TORCH_GEMM)
    study = json.loads(json.dumps(KINDS_STUDY))
    if broken:
        (kdir / "04_broken.py").write_text(BROKEN_TRITON)
        study["variants"].append({**study["variants"][1], "id": "04_broken"})
    (root / "config" / "studies" / "kinds.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    cfgfile = root / "config" / "config.yaml"
    conf = yaml.safe_load(cfgfile.read_text())
    cfgfile.write_text(yaml.safe_dump({**conf, "studies": ["kinds"], "gpu": "none"}))
    return root


def load(root: Path) -> config.Study:
    return config.load_project_file(root / "config" / "config.yaml").study("kinds")


def test_kinds_in_the_real_config():
    p = config.load_project_file(REPO / "config" / "config.yaml")
    sg = p.study("sgemm").variant("14_triton")
    assert sg.kind == "triton" and sg.source == "kernels/sgemm/14_triton.py"
    assert sg.is_tuned and sg.block == ("32 * NUM_WARPS",)
    cand = p.study("sgemm").variant(sg.candidates[0])
    assert cand.launch({"M": 64, "N": 64, "K": 64}).block == (32 * cand.defines["NUM_WARPS"], 1, 1)
    assert cand.defines["GROUP_M"] == 8 and "NUM_STAGES" in cand.tune_point
    for study in ("softmax", "softmax_bf16"):
        v = p.study(study).variant("07_triton")
        assert v.kind == "triton" and v.source == "kernels/softmax/07_triton.py"
        assert v.says and v.predict and len(v.candidates) >= 4
        c = p.study(study).variant(v.candidates[0])
        assert c.defines["NUM_STAGES"] == 3  # Triton's default, filled in as a define
    assert p.study("sgemm").variant("01_naive").kind == "cuda"
    # the kind is part of the spec (a change reruns), cuda's spec is unchanged
    assert "kind" not in p.study("sgemm").variant("01_naive").spec()
    assert sg.spec()["kind"] == "triton"


def test_default_source_path_by_kind(tmp_path):
    root = kinds_repo(tmp_path / "repo")
    s = load(root)
    assert [v.kind for v in s.variants] == ["cuda", "triton", "torch"]
    assert [v.source for v in s.variants] == [
        "kernels/kinds/01_cuda.cu",
        "kernels/kinds/02_triton.py",
        "kernels/kinds/03_torch.py",
    ]
    assert s.variant("03_torch").defines == {"SCALE": 1}
    assert s.variant("02_triton").defines["NUM_STAGES"] == 3


@pytest.mark.parametrize(
    "change, message",
    [
        ({"kind": "rust"}, "variants[1] (02_triton).kind: 'rust' is not one of"),
        (
            {"entry": "nope"},
            "variants[1] (02_triton): entry 'nope' is not a function of "
            "kernels/kinds/02_triton.py (functions: sgemm_triton)",
        ),
        ({"block": [128]}, "variants[1] (02_triton)"),
        ({"source": "kernels/kinds/01_cuda.cu"}, "a triton variant's source is a .py file"),
    ],
)
def test_bad_triton_variants_name_study_and_variant(tmp_path, change, message):
    root = kinds_repo(tmp_path / "repo")
    path = root / "config" / "studies" / "kinds.yaml"
    data = yaml.safe_load(path.read_text())
    data["variants"][1].update(change)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(config.ConfigError) as e:
        load(root)
    assert str(e.value).startswith("config/studies/kinds.yaml: ")
    assert message in str(e.value)


def test_a_torch_variant_takes_no_launch_geometry(tmp_path):
    root = kinds_repo(tmp_path / "repo")
    path = root / "config" / "studies" / "kinds.yaml"
    data = yaml.safe_load(path.read_text())
    data["variants"][2]["grid"] = [1]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(config.ConfigError, match=r"variants\[2\] \(03_torch\)"):
        load(root)


def test_triton_compiles_ahead_of_time_for_an_explicit_target(tmp_path):
    """No GPU: Triton compiles for sm_90 from the config's arch; ptxas's report and the
    cubin's SASS fill the same fields as an nvcc build."""
    p = config.load_project_file(REPO / "config" / "config.yaml")
    study = p.study("softmax_bf16")
    v = study.variant(study.variant("07_triton").candidates[0])
    cubin = tmp_path / "k.cubin"
    res = kinds.compile_triton(v, "sm_90", REPO, study.dtype, study.problem, cubin)
    data = cubin.read_bytes()
    assert data[:4] == b"\x7fELF"
    assert res.resources.function == "softmax_triton" and res.resources.registers > 0
    assert res.nvcc_version == f"triton {kinds.triton_version()}"
    assert res.params == 4 + 2  # R, N, x, y and Triton's two scratch pointers
    assert res.num_warps == v.defines["NUM_WARPS"]
    assert sum(res.sass.values()) > 50 and any(op.startswith("SHFL") for op in res.sass)
    assert "'sm_90a'" in res.log or "'sm_90'" in res.log
    # the cubin is sm_90a code (Triton's target for capability 9.0), and its row says so
    assert res.arch == "sm_90a"
    from kernelbook.build.job import compile_job

    compile_job(p, study, v, tmp_path / "k2.cubin", tmp_path / "b.parquet", tmp_path / "s.parquet")
    assert tables.read(tmp_path / "b.parquet").iloc[0]["arch"] == "sm_90a"
    # the bf16 study's pointers are bf16 (the kernel computes in float32)
    assert "'x': '*bf16'" in res.command[0]


def test_sgemm_triton_keeps_fp32_without_tf32(tmp_path):
    p = config.load_project_file(REPO / "config" / "config.yaml")
    study = p.study("sgemm")
    v = study.variant(study.variant("14_triton").candidates[0])
    res = kinds.compile_triton(v, "sm_90", REPO, study.dtype, study.problem, tmp_path / "k.cubin")
    assert res.sass.get("FFMA", 0) > 100
    assert not any(op.startswith(("HMMA", "HGMMA")) for op in res.sass)  # no TF32 tensor ops
    assert res.smem_dynamic > 0  # operands staged in shared memory, passed at launch


def test_bench_builds_every_variant_before_it_takes_a_gpu(tmp_path):
    """`kernelbook bench` compiles first and takes the GPU's lock after (so that parallel
    benches' compiles do not queue behind each other's measurements): here, with no GPU, a
    variant that does not compile is named, where asking for the GPU first would have said
    only that there is none; a batch that compiles, or records its failed compiles, gets as
    far as the GPU."""
    from kernelbook import gpu

    if gpu.detect()[0] is not None:
        pytest.skip("a GPU is here: the batch would run, not stop at the GPU")
    root = kinds_repo(tmp_path / "repo", broken=True)
    proc = kernelbook_cli(root, "bench", "kinds", "01_cuda", "04_broken", "--size", "64")
    assert proc.returncode != 0
    assert "kinds/04_broken: triton failed on kernels/kinds/04_broken.py" in proc.stderr
    assert "no GPU to run on" not in proc.stderr
    proc = kernelbook_cli(root, "bench", "kinds", "01_cuda", "02_triton", "--size", "64")
    assert proc.returncode != 0 and "no GPU to run on" in proc.stderr, proc.stderr
    # --record-failure: the failed compile is kept for its rows, and the batch goes on to
    # the GPU (where its rows would be written: tests/test_kinds_gpu.py)
    args = ["bench", "kinds", "04_broken", "01_cuda", "--size", "64", "--record-failure"]
    proc = kernelbook_cli(root, *args)
    assert "kinds/04_broken: compile failed: kinds/04_broken: triton failed" in proc.stderr
    assert proc.returncode != 0 and "no GPU to run on" in proc.stderr, proc.stderr


def test_a_triton_compile_error_names_study_and_variant(tmp_path):
    root = kinds_repo(tmp_path / "repo", broken=True)
    s = load(root)
    with pytest.raises(build.CompileError) as e:
        kinds.compile_triton(
            s.variant("04_broken"), "sm_90", root, "float32", "gemm", tmp_path / "k.cubin"
        )
    assert str(e.value).startswith("kinds/04_broken: triton failed on kernels/kinds/04_broken.py")
    assert "bogus_argument" in str(e.value)
    # the cause is on the first line, the one the run's closing summary shows
    first = str(e.value).splitlines()[0]
    assert first.split("): ", 1)[1] == str(e.value).split("\ncommand:")[0].splitlines()[-1]
    assert not (tmp_path / "k.cubin").exists()


def test_a_missing_constexpr_define_is_a_compile_error(tmp_path):
    root = kinds_repo(tmp_path / "repo")
    path = root / "config" / "studies" / "kinds.yaml"
    data = yaml.safe_load(path.read_text())
    del data["variants"][1]["defines"]["GROUP_M"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(build.CompileError, match="kinds/02_triton: .*GROUP_M"):
        kinds.compile_triton(
            load(root).variant("02_triton"), "sm_90", root, "float32", "gemm", tmp_path / "k"
        )


def test_snakemake_builds_each_kind(tmp_path):
    """A real dry run, then real compile jobs: ok rows for cuda and triton, a not_compiled row
    for torch, a failed row (not a crash) for a triton variant that does not compile."""
    root = kinds_repo(tmp_path / "repo", broken=True)
    dry = snakemake(root, "-n", "--cores", "1", "results/build/kinds/build.parquet")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    compiled = {w["variant"] for r, w in planned_jobs(dry.stdout) if r == "compile"}
    assert compiled == {"01_cuda", "02_triton", "03_torch", "04_broken"}
    proc = snakemake(
        root,
        "--cores",
        "2",
        "results/build/kinds/build.parquet",
        "results/build/kinds/sass.parquet",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = tables.read(root / "results" / "build" / "kinds" / "build.parquet").set_index("variant")
    assert rows.loc["01_cuda", "status"] == "ok" and rows.loc["01_cuda", "kind"] == "cuda"
    t = rows.loc["02_triton"]
    assert t["status"] == "ok" and t["kind"] == "triton" and t["registers"] > 0
    assert t["nvcc_version"].startswith("triton ") and t["sass_instructions"] > 50
    assert t["smem_dynamic_bytes"] >= 0 and t["cubin_sha256"]
    assert t["nvcc_flags"] == ""
    torch_row = rows.loc["03_torch"]
    assert torch_row["status"] == "not_compiled" and "no compile step" in torch_row["reason"]
    assert torch_row["cubin_sha256"] == "" and torch_row["kind"] == "torch"
    bad = rows.loc["04_broken"]
    assert bad["status"] == "failed" and "bogus_argument" in bad["reason"]
    assert bad["reason"].startswith("compile: kinds/04_broken: triton failed")
    log = (root / "results" / "logs" / "kinds" / "compile" / "04_broken.log").read_text()
    assert "recorded as a failed build" in log and "Traceback" not in log
    sass = tables.read(root / "results" / "build" / "kinds" / "sass.parquet")
    assert set(sass["variant"]) == {"01_cuda", "02_triton"}
    # the build gate reports the failed triton variant, not the torch one
    gate = snakemake(root, "--cores", "1", "results/build/kinds/build.ok")
    assert gate.returncode != 0
    assert "kinds/04_broken - [compile] compile: triton failed" in gate.stderr
    assert "03_torch" not in gate.stderr


def test_cli_compile_of_a_broken_triton_variant_fails_cleanly(tmp_path):
    root = kinds_repo(tmp_path / "repo", broken=True)
    proc = kernelbook_cli(root, "compile", "kinds", "04_broken", "--cubin", str(tmp_path / "k"))
    assert proc.returncode == 1
    assert proc.stderr.startswith("kernelbook: error: kinds/04_broken: triton failed")


def test_ncu_selects_a_torch_variants_kernels_by_nvtx_range(tmp_path, monkeypatch):
    # the command is only built, not run: any executable named ncu on PATH will do
    (tmp_path / "ncu").write_text("#!/bin/sh\n")
    (tmp_path / "ncu").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    cmd = profile.ncu_command(None, Path("r"), ["launch"], {})
    assert "--nvtx" in cmd and cmd[cmd.index("--nvtx-include") + 1] == "kernelbook_variant/"
    assert "-k" not in cmd and "--launch-count" not in cmd
    one = profile.ncu_command("sgemm_naive", Path("r"), ["launch"], {})
    assert one[one.index("-k") + 1] == "regex:^sgemm_naive$" and "--nvtx" not in one


def test_a_torch_variants_kernels_are_summed_and_listed():
    k1 = (
        "gemv",
        [
            ("gpu__time_duration.sum", 2000.0, "ns"),
            ("dram__bytes_read.sum", 10.0, "B"),
            ("sm__throughput.avg.pct_of_peak_sustained_elapsed", 50.0, "%"),
        ],
    )
    k2 = (
        "add",
        [
            ("gpu__time_duration.sum", 1000.0, "ns"),
            ("dram__bytes_read.sum", 5.0, "B"),
            ("sm__throughput.avg.pct_of_peak_sustained_elapsed", 90.0, "%"),
        ],
    )
    name, metrics = profile.combine_kernels([k1, k2])
    m = {n: v for n, v, _ in metrics}
    assert name == "gemv; add"
    assert m["gpu__time_duration.sum"] == 3000.0 and m["dram__bytes_read.sum"] == 15.0
    assert m["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == 50.0  # the longest kernel's
