"""kernelbook.build with the real nvcc and cuobjdump (no GPU needed: nothing is launched)."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from kernelbook import config as cfg
from kernelbook import provenance
from kernelbook.build import nvcc as build
from kernelbook.build.nvcc import CompileError

REPO = Path(__file__).resolve().parents[1]
ARCH = "sm_90"
FLAGS = ["-O3", "-lineinfo"]

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


@pytest.fixture(scope="module")
def project():
    return cfg.load_project_file(REPO / "config" / "config.yaml")


@pytest.fixture(scope="module")
def variants(project):
    controls = cfg.load_study(
        REPO / "config" / "studies" / "controls.yaml", project.settings, project.root
    )
    sgemm = project.study("sgemm")
    return {
        "01_naive": sgemm.variant("01_naive"),
        "02_coalescing": sgemm.variant("02_coalescing"),
        "93_race": controls.variant("93_race"),
    }


@pytest.fixture(scope="module")
def built(variants, tmp_path_factory):
    out = tmp_path_factory.mktemp("cubins")
    results = {}
    for vid, v in variants.items():
        cubin = out / v.study / vid / "kernel.cubin"
        results[vid] = (build.compile_variant(v, ARCH, FLAGS, REPO, cubin), cubin)
    return results


def nvcc_ptxas_log(source: Path, *extra: str) -> str:
    """Compile ``source`` to a cubin with -Xptxas -v and return what nvcc printed."""
    cubin = source.with_suffix(".cubin")
    proc = subprocess.run(
        [
            "nvcc",
            "-cubin",
            *build.gencode(ARCH),
            "-O3",
            "-Xptxas",
            "-v",
            *extra,
            "-o",
            str(cubin),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def cuobjdump_sass(cubin: Path) -> str:
    proc = subprocess.run(
        [build.tool("cuobjdump"), "-sass", str(cubin)],
        capture_output=True,
        text=True,
        env=build.tool_env(),
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# ------------------------------------------------------------------------------------------
# The real kernels


@pytest.mark.parametrize("vid", ["01_naive", "02_coalescing", "93_race"])
def test_real_kernel_resources(built, variants, vid):
    res, cubin = built[vid]
    r = res.resources
    assert r.function == variants[vid].entry
    assert 0 < r.registers <= 255
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0
    assert r.stack_bytes == 0
    # the controls' race kernel has two 32x32 float tiles and (deliberately) no barrier
    assert r.smem_static_bytes == (8192 if vid == "93_race" else 0)
    assert r.barriers == 0
    assert f"Compiling entry function '{variants[vid].entry}' for 'sm_90'" in res.log


@pytest.mark.parametrize("vid", ["01_naive", "02_coalescing", "93_race"])
def test_real_kernel_sass_histogram(built, vid):
    res, _ = built[vid]
    sass = res.sass
    ops = Counter()
    for opcode, n in sass.items():
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*", opcode), opcode
        assert n > 0
        ops[opcode.split(".")[0]] += n
    assert ops["FFMA"] > 0
    assert ops["LDG"] > 0
    assert ops["STG"] > 0
    assert ops["EXIT"] > 0
    if vid == "93_race":
        assert ops["LDS"] > 0 and ops["STS"] > 0
        assert ops["BAR"] == 0  # no __syncthreads: that is the bug it exists to show
    else:
        assert ops["LDS"] == 0 and ops["STS"] == 0


def test_real_kernel_outputs(built, variants):
    for vid, (res, cubin) in built.items():
        assert cubin.is_file()
        assert cubin.read_bytes()[:4] == b"\x7fELF"
        assert not cubin.with_name(cubin.name + ".tmp").exists()
        assert list(cubin.parent.iterdir()) == [cubin]
        cmd = res.command
        assert cmd[0] == "nvcc" and "-cubin" in cmd
        assert "-gencode=arch=compute_90,code=sm_90" in cmd
        assert cmd[cmd.index("-Xptxas") + 1] == "-v"
        for k, v in variants[vid].defines.items():
            assert f"-D{k}={v}" in cmd
        assert cmd[-1] == str(REPO / variants[vid].source)
        assert re.fullmatch(r"\d+\.\d+(\.\d+)?", res.nvcc_version), res.nvcc_version
    # the race kernel's SASS is its own, not the gemm kernels'
    assert built["93_race"][0].sass != built["01_naive"][0].sass


def test_sass_histogram_matches_cuobjdump(built):
    res, cubin = built["01_naive"]
    text = cuobjdump_sass(cubin)
    assert "Function : sgemm_naive" in text
    assert build.parse_sass(text)["sgemm_naive"] == res.sass


def test_defines_change_the_build(variants, tmp_path):
    v = dataclasses.replace(variants["01_naive"], defines={"BS": 16})
    res = build.compile_variant(v, ARCH, FLAGS, REPO, tmp_path / "k.cubin")
    assert "-DBS=16" in res.command
    assert res.resources.registers > 0


def test_variant_flags_follow_global_flags(variants, tmp_path):
    v = dataclasses.replace(variants["01_naive"], nvcc_flags=("-maxrregcount=24",))
    res = build.compile_variant(v, ARCH, FLAGS, REPO, tmp_path / "k.cubin")
    cmd = res.command
    assert cmd.index("-O3") < cmd.index("-maxrregcount=24")
    assert res.resources.registers <= 24


# ------------------------------------------------------------------------------------------
# parse_ptxas on real nvcc output


SPILL = r"""
extern "C" __global__ void __launch_bounds__(1024, 2)
k_spill(const float* in, float* out, int n, int idx) {
  float a[256];
#pragma unroll
  for (int i = 0; i < 256; ++i) a[i] = in[i * n + threadIdx.x];
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 256; ++i) s += a[i] * a[(i * 7 + idx) & 255];
  out[threadIdx.x] = s + a[idx & 255];
}
"""

SMEM = r"""
extern "C" __global__ void k_smem(float* out, int n) {
  __shared__ float tile[256];
  __shared__ double pad[16];
  tile[threadIdx.x] = out[threadIdx.x];
  pad[threadIdx.x % 16] = n;
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % 256] * 2.0f + pad[(threadIdx.x + 3) % 16];
}
"""

PRED = r"""
extern "C" __global__ void k_branchy(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = 0.0f;
  for (int j = 0; j < n; ++j) {
    float v = in[(i + j) % n];
    if (v > 0.0f) s += v; else s -= 2.0f * v;
  }
  out[i] = s;
}
"""

HELPER = r"""
__device__ __noinline__ float helper(float* p, int i) {
  float buf[64];
  for (int j = 0; j < 64; ++j) buf[j] = p[j] * j;
  return buf[i & 63];
}
"""


def test_parse_ptxas_spills(tmp_path):
    src = tmp_path / "spill.cu"
    src.write_text(SPILL)
    log = nvcc_ptxas_log(src, "-maxrregcount=32")
    res = build.parse_ptxas(log)
    assert set(res) == {"k_spill"}
    r = res["k_spill"]
    assert r.registers <= 32
    assert r.spill_store_bytes > 0 and r.spill_load_bytes > 0
    assert r.stack_bytes > 0
    # the numbers are ptxas's own, copied exactly
    m = re.search(
        r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log
    )
    assert (r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes) == tuple(map(int, m.groups()))


def test_parse_ptxas_several_entries_with_barriers_and_smem(tmp_path):
    src = tmp_path / "multi.cu"
    src.write_text(SMEM + PRED + SPILL)
    log = nvcc_ptxas_log(src, "-maxrregcount=32")
    res = build.parse_ptxas(log)
    assert set(res) == {"k_smem", "k_branchy", "k_spill"}
    assert res["k_smem"].barriers == 1
    assert res["k_smem"].smem_static_bytes == 256 * 4 + 16 * 8
    assert res["k_smem"].spill_store_bytes == 0
    assert res["k_branchy"].barriers == 0 and res["k_branchy"].smem_static_bytes == 0
    assert res["k_spill"].spill_store_bytes > 0 and res["k_spill"].smem_static_bytes == 0
    for name, r in res.items():
        assert r.function == name
        used = re.search(rf"entry function '{name}'.*?Used (\d+) registers", log, re.S)
        assert r.registers == int(used.group(1))


def test_parse_ptxas_device_function_does_not_overwrite_entry(tmp_path):
    src = tmp_path / "helper.cu"
    src.write_text(
        HELPER
        + SPILL.replace(
            "out[threadIdx.x] = s + a[idx & 255];",
            "out[threadIdx.x] = s + a[idx & 255] + helper(out, idx);",
        )
        + SMEM
    )
    log = nvcc_ptxas_log(src, "-maxrregcount=32")
    assert "Function properties for _Z6helperPfi" in log
    m = re.search(
        r"Function properties for k_spill\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, "
        r"(\d+) bytes spill loads",
        log,
    )
    expected = tuple(map(int, m.groups()))
    assert expected[1] > 0
    r = build.parse_ptxas(log)["k_spill"]
    assert (r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes) == expected


def test_parse_ptxas_ignores_text_outside_entries():
    assert build.parse_ptxas("") == {}
    assert build.parse_ptxas("ptxas info    : 0 bytes gmem\nUsed 12 registers\n") == {}


# ------------------------------------------------------------------------------------------
# parse_sass on real cuobjdump output


def independent_histograms(text: str) -> dict[str, Counter]:
    """Opcode counts per function, parsed another way than build.parse_sass."""
    out: dict[str, Counter] = {}
    current = None
    for line in text.splitlines():
        if "Function :" in line:
            current = out.setdefault(line.split("Function :")[1].strip(), Counter())
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/(.*?);", line)
        if m and current is not None:
            tokens = m.group(2).split()
            if tokens[0].startswith("@"):
                tokens = tokens[1:]
            current[tokens[0]] += 1
    return out


def test_parse_sass_counts_predicated_instructions_under_their_opcode(tmp_path):
    src = tmp_path / "sass.cu"
    src.write_text(SMEM + PRED)
    nvcc_ptxas_log(src)
    text = cuobjdump_sass(src.with_suffix(".cubin"))
    predicated = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P[T0-9]+)\s+([A-Z][A-Z0-9_.]*)", text)
    guards = {g for g, _ in predicated}
    assert any(g.startswith("@!") for g in guards), guards
    assert any(g.startswith("@P") for g in guards), guards
    assert any(op == "BRA" for _, op in predicated)

    hist = build.parse_sass(text)
    assert set(hist) == {"k_smem", "k_branchy"}
    assert hist == independent_histograms(text)
    # nothing counted under a guard's name
    assert not any(
        op.startswith("@") or op.startswith("P") and op[1:].isdigit() for op in hist["k_branchy"]
    )
    # every predicated BRA/EXIT is in the opcode's count
    section = text.split("Function : k_branchy")[1].split("Function :")[0]
    n_bra = len(re.findall(r"\*/\s+(?:@!?U?P[T0-9]+\s+)?BRA\b", section))
    assert n_bra > len(re.findall(r"\*/\s+BRA\b", section))  # some BRA are predicated
    assert hist["k_branchy"]["BRA"] == n_bra
    assert hist["k_smem"]["BAR.SYNC.DEFER_BLOCKING"] + hist["k_smem"]["BAR.SYNC"] >= 1


def test_parse_sass_ignores_headers():
    assert build.parse_sass("") == {}
    text = '\tcode for sm_90\n\t\tFunction : k\n\t.headerflags\t@"EF_CUDA_SM90"\n'
    assert build.parse_sass(text) == {"k": Counter()}


# ------------------------------------------------------------------------------------------
# Failures


def test_compile_error_names_study_variant_and_nvcc_message(variants, tmp_path):
    (tmp_path / "kernels" / "x").mkdir(parents=True)
    (tmp_path / "kernels" / "x" / "77_bad.cu").write_text(
        (REPO / "kernels" / "sgemm" / "01_naive.cu").read_text() + "\nthis is not C++;\n"
    )
    v = dataclasses.replace(variants["01_naive"], id="77_bad", source="kernels/x/77_bad.cu")
    cubin = tmp_path / "out" / "kernel.cubin"
    with pytest.raises(CompileError) as e:
        build.compile_variant(v, ARCH, FLAGS, tmp_path, cubin)
    msg = str(e.value)
    assert msg.startswith("sgemm/77_bad: nvcc failed on kernels/x/77_bad.cu")
    assert "error" in msg and "this is not C++" in msg  # nvcc's own diagnostic
    assert "77_bad.cu(" in msg  # with its file(line)
    assert "command: nvcc" in msg
    assert not cubin.exists()
    assert list(cubin.parent.iterdir()) == []  # no .tmp left behind


def test_missing_define_is_a_compile_error(variants, tmp_path):
    v = dataclasses.replace(variants["01_naive"], defines={})
    with pytest.raises(
        CompileError, match=r"(?s)sgemm/01_naive: nvcc failed.*BS \(block side\) must be defined"
    ):
        build.compile_variant(v, ARCH, FLAGS, REPO, tmp_path / "k.cubin")


def test_wrong_entry_lists_the_kernels_found(variants, tmp_path):
    v = dataclasses.replace(variants["01_naive"], entry="sgemm_nave")
    cubin = tmp_path / "kernel.cubin"
    with pytest.raises(CompileError) as e:
        build.compile_variant(v, ARCH, FLAGS, REPO, cubin)
    msg = str(e.value)
    assert msg.startswith("sgemm/01_naive: entry 'sgemm_nave' is not a kernel")
    assert "kernels found: sgemm_naive" in msg
    assert not cubin.exists()
    assert list(tmp_path.iterdir()) == []


def test_wrong_entry_with_several_kernels(variants, tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "two.cu").write_text(SMEM + PRED)
    v = dataclasses.replace(
        variants["01_naive"], source="kernels/two.cu", entry="k_main", defines={}
    )
    with pytest.raises(CompileError) as e:
        build.compile_variant(v, ARCH, FLAGS, tmp_path, tmp_path / "o" / "k.cubin")
    found = re.search(r"kernels found: ([^;]*);", str(e.value)).group(1)
    assert set(found.split(", ")) == {"k_smem", "k_branchy"}


def test_missing_source(variants, tmp_path):
    v = dataclasses.replace(variants["01_naive"], source="kernels/sgemm/nope.cu")
    with pytest.raises(
        CompileError, match="sgemm/01_naive: source kernels/sgemm/nope.cu not found"
    ):
        build.compile_variant(v, ARCH, FLAGS, REPO, tmp_path / "k.cubin")


def test_cubin_cache_reuses_only_identical_builds(variants, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv(build.CACHE_ENV, str(cache))
    root = tmp_path / "repo"
    shutil.copytree(REPO / "kernels" / "sgemm", root / "kernels" / "sgemm")
    v = variants["01_naive"]
    first = build.compile_variant(v, ARCH, FLAGS, root, tmp_path / "a" / "k.cubin")
    assert len(list(cache.iterdir())) == 1
    # the same build elsewhere (another copy, another output): the cached cubin and report
    shutil.copytree(root, tmp_path / "copy")
    again = build.compile_variant(v, ARCH, FLAGS, tmp_path / "copy", tmp_path / "b" / "k.cubin")
    assert len(list(cache.iterdir())) == 1
    assert (again.resources, again.sass, again.log) == (first.resources, first.sass, first.log)
    assert (tmp_path / "b" / "k.cubin").read_bytes() == (tmp_path / "a" / "k.cubin").read_bytes()
    assert again.command[-1] == str(tmp_path / "copy" / v.source)  # its own command
    # anything that changes the build misses: defines, flags, the source, a quoted include
    build.compile_variant(
        dataclasses.replace(v, defines={"BS": 16}), ARCH, FLAGS, root, tmp_path / "c.cubin"
    )
    build.compile_variant(v, ARCH, [*FLAGS, "-DX=1"], root, tmp_path / "d.cubin")
    src = root / v.source
    src.write_text('#include "extra.h"\n' + src.read_text())
    (src.parent / "extra.h").write_text("// one\n")
    build.compile_variant(v, ARCH, FLAGS, root, tmp_path / "e.cubin")
    (src.parent / "extra.h").write_text("// two\n")
    build.compile_variant(v, ARCH, FLAGS, root, tmp_path / "f.cubin")
    assert len(list(cache.iterdir())) == 5
    # a failed build is not cached
    src.write_text(src.read_text() + "\nthis is not C++;\n")
    with pytest.raises(CompileError):
        build.compile_variant(v, ARCH, FLAGS, root, tmp_path / "g.cubin")
    assert len(list(cache.iterdir())) == 5


def test_tools():
    assert Path(build.tool("cuobjdump")).is_file()
    assert Path(build.tool("nvcc")).is_file()
    with pytest.raises(CompileError, match="no-such-tool-xyz not found"):
        build.tool("no-such-tool-xyz")
    assert build.gencode("sm_90a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert build.define_flags({"BM": 128, "X": 1.5}) == ["-DBM=128", "-DX=1.5"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", build.nvcc_version())


def test_source_hash_covers_quoted_includes(tmp_path):
    """source_sha256 is the file's own hash where it includes nothing (every published
    kernel), and otherwise covers the headers it includes with quotes, transitively."""
    (tmp_path / "inner.cuh").write_text("#define INNER 1\n")
    (tmp_path / "outer.cuh").write_text('#include "inner.cuh"\n#define OUTER 2\n')
    src = tmp_path / "k.cu"
    src.write_text('#include "outer.cuh"\n#include <cuda_bf16.h>\n#include "absent.cuh"\n')
    plain = tmp_path / "plain.cu"
    plain.write_text('extern "C" __global__ void k() {}\n')
    assert provenance.quoted_includes(src) == [
        ("outer.cuh", tmp_path / "outer.cuh"),
        ("inner.cuh", tmp_path / "inner.cuh"),
    ]
    assert provenance.sha256_source(plain) == provenance.sha256_file(plain)
    before = provenance.sha256_source(src)
    assert before != provenance.sha256_file(src)
    (tmp_path / "inner.cuh").write_text("#define INNER 3\n")
    assert provenance.sha256_source(src) != before
    py = tmp_path / "k.py"
    py.write_text('#include "outer.cuh"\n')  # a Python comment, not an include
    assert provenance.quoted_includes(py) == [] and provenance.sha256_source(
        py
    ) == provenance.sha256_file(py)


@pytest.mark.slow
def test_editing_a_shared_header_recompiles_the_kernels_that_include_it(tmp_path):
    from conftest import copy_repo, planned_jobs, snakemake
    from test_workflow import edit

    root = copy_repo(tmp_path / "repo")
    args = ["--config", "studies=[hgemm]", "gpu=none"]
    target = "results/build/hgemm/06_wgmma_tma/kernel.cubin"
    other = "results/build/hgemm/05_cp_async/kernel.cubin"  # includes no header
    proc = snakemake(root, "--cores", "2", target, other, *args, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    header = root / "kernels" / "hgemm" / "sm90.cuh"
    edit(header, header.read_text() + "\n// a comment: the header changed\n")
    proc = snakemake(root, "-n", target, other, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = planned_jobs(proc.stdout + proc.stderr)
    assert [w.get("variant") for rule, w in jobs if rule == "compile"] == ["06_wgmma_tma"]


def test_the_device_tables_micro_benchmarks_compile_to_wide_loads(tmp_path):
    """The read ceilings' kernels (kernelbook.measure.microbench), compiled as CuPy does on the
    GPU host: each streams 16-byte loads, dram_read four of them a loop trip plus its tail."""
    from kernelbook.measure import microbench

    src = tmp_path / "microbench.cu"
    src.write_text(microbench.SOURCE)
    cubin = tmp_path / "microbench.cubin"
    cmd = ["nvcc", "-arch=sm_90", "-cubin", "-std=c++17", "-o", str(cubin), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    sass = build.sass_of(cubin, 120, "microbench")
    assert set(sass) == {"dram_read", "l2_read", "l1_read"}, set(sass)
    wide = {f: sum(n for op, n in ops.items() if op.startswith("LDG.E.128"))
            for f, ops in sass.items()}  # fmt: skip
    assert all(wide.values()), wide
    assert wide["dram_read"] >= 5, wide  # 4 unrolled + the tail


def test_the_gpu_tiers_kernels_compiled_ahead_are_every_studys_cuda_jobs():
    # conftest compiles these into the run's cubin cache before the GPU tests: a study that
    # stopped loading would drop out of the list silently, its tests paying nvcc each again
    from conftest import candidate_sample, gpu_test_kernels

    listed: dict[str, set[str]] = {}
    for _, study, variant in gpu_test_kernels():
        assert variant.kind == "cuda"
        listed.setdefault(study.name, set()).add(variant.id)
    studies = {p.stem for p in (REPO / "config" / "studies").glob("*.yaml")}
    assert set(listed) == studies - {"regimes"}, set(listed) ^ studies  # regimes: torch only
    assert {"01_naive", "02_coalescing"} <= listed["sgemm"]
    assert set(candidate_sample("sgemm", "10_warptiling")) <= listed["sgemm"]
    assert not any(v.startswith("14_triton") for v in listed["sgemm"])


def test_parse_sass_keeps_a_warpgroup_mmas_shape(tmp_path):
    """HGMMA's mnemonic carries its shape in lower case (HGMMA.64x128x16.F32.BF16): counted
    whole, as cuobjdump prints it (the attention study's first wgmma step, built for sm_90a)."""
    from kernelbook import config as cfg

    st = cfg.load_project_file(
        REPO / "config" / "config.yaml", overrides={"studies": ["attention"]}
    ).study("attention")
    v = st.variant("07_wgmma_tma")
    res = build.compile_variant(v, v.target("sm_90"), ["-O3"], REPO, tmp_path / "k.cubin")
    text = cuobjdump_sass(tmp_path / "k.cubin")
    hist = build.parse_sass(text)
    assert hist == independent_histograms(text)
    gmma = [op for op in hist[v.entry] if op.startswith("HGMMA")]
    assert gmma and all(re.match(r"HGMMA\.64x\d+x16\.F32\.BF16", op) for op in gmma), gmma
    assert sum(res.sass.values()) == sum(hist[v.entry].values())
