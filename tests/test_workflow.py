"""The Snakemake pipeline and the CLI, run for real (compile only) in copies of the repository.

Also the repository's own lint gates: snakemake --lint, snakefmt, ruff.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import REPO, kernelbook_cli, planned_jobs, run_in, snakemake

from kernelbook import config as cfg
from kernelbook import layout, tables, tune

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")

GATHERS = {"build_table", "sass_table", "loop_table", "build_gate", "all"}


def _published(root: Path, study: str) -> list[pd.DataFrame]:
    return [
        tables.read(layout.published_paths(root / "worklogs", gpu, name)["measurements"])
        for gpu, name in layout.published(root / "worklogs")
        if name == study
    ]


def job_ids(root: Path, study: str = "sgemm") -> list[str]:
    """What a run without a GPU compiles of a study: its plain variants and the candidates
    the published pages show (candidates_without_gpu: used)."""
    project = cfg.load_project_file(root / "config" / "config.yaml")
    return tune.jobs_without_gpu(project.study(study), _published(root, study))


def all_job_ids(root: Path) -> list[tuple[str, str]]:
    """(study, job) of every configured study, compiled without a GPU."""
    project = cfg.load_project_file(root / "config" / "config.yaml")
    return sorted((name, v) for name in project.studies for v in job_ids(root, name))


def compiled_jobs(jobs) -> list[tuple[str, str]]:
    return sorted((w["study"], w["variant"]) for rule, w in jobs if rule == "compile")


def output(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


def compiled_variants(jobs) -> list[str]:
    return sorted(w["variant"] for rule, w in jobs if rule == "compile")


def edit(path: Path, text: str) -> None:
    """Change a file's content, and make sure its mtime moves past its outputs'."""
    path.write_text(text)
    later = time.time() + 2
    os.utime(path, (later, later))


# ------------------------------------------------------------------------------------------
# Lint gates


def test_snakemake_lint(repo_copy):
    proc = snakemake(repo_copy, "--lint")
    assert proc.returncode == 0, output(proc)


def test_snakefmt_check():
    proc = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow/"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, output(proc)


def test_ruff_check():
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, output(proc)


def test_ruff_format_check():
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, output(proc)


# ------------------------------------------------------------------------------------------
# The DAG


def test_dry_run_lists_a_compile_job_per_variant(repo_copy, nogpu_args):
    proc = snakemake(repo_copy, "-n", "all", *nogpu_args)
    assert proc.returncode == 0, output(proc)
    jobs = planned_jobs(output(proc))
    ids = job_ids(repo_copy)
    assert {"01_naive", "02_coalescing"} <= set(ids)
    assert compiled_jobs(jobs) == all_job_ids(repo_copy)  # every study, every variant
    studies = list(cfg.load_project_file(repo_copy / "config" / "config.yaml").studies)
    assert {"sgemm", "transpose", "softmax", "softmax_bf16"} <= set(studies)
    expect = {
        "all": 1,
        "build_table": len(studies),
        "sass_table": len(studies),
        "loop_table": len(studies),
        "build_gate": len(studies),
    }
    gathers = [rule for rule, _ in jobs if rule != "compile"]
    assert {r: gathers.count(r) for r in set(gathers)} == expect
    # no GPU: nothing is benched
    assert not [rule for rule, _ in jobs if rule in ("bench", "select_tuned", "device")]
    assert not (repo_copy / "results").exists()  # a dry run writes nothing


def test_without_a_gpu_the_candidates_the_pages_show_are_compiled(repo_copy):
    """candidates_without_gpu: used compiles each tuned variant's published winners (its
    first candidate where nothing is published) and says so; 'all' compiles every one."""
    shutil.copytree(REPO / "worklogs", repo_copy / "worklogs")
    proc = snakemake(repo_copy, "-n", "all", "--config", "gpu=none")
    assert proc.returncode == 0, output(proc)
    compiled = compiled_jobs(planned_jobs(output(proc)))
    assert compiled == all_job_ids(repo_copy)
    project = cfg.load_project_file(repo_copy / "config" / "config.yaml")
    sgemm = project.study("sgemm")
    published = tables.read(repo_copy / "worklogs/nvidia-h200/sgemm/data/measurements.parquet")
    won = set(published.loc[published["variant_kind"] == "tuned", "tuned_from"].dropna())
    built = {v for s, v in compiled if s == "sgemm"}
    tuned = [v for v in sgemm.variants if v.is_tuned]
    current = {c for v in tuned for c in v.candidates}
    assert won & current and won & current <= built  # the pages' winners still in the spaces
    for v in tuned:  # at least one candidate of every tuned variant
        assert any(c in v.candidates for c in built), v.id
        if not won & set(v.candidates):  # its space changed since the page: the first one
            assert v.candidates[0] in built, v.id
    assert len(compiled) < sum(len(st.jobs()) for st in project.studies.values())
    said = [line for line in proc.stderr.splitlines() if "candidates" in line]
    assert said and "the published pages show are compiled" in said[0], proc.stderr
    proc = snakemake(repo_copy, "-n", "all", "--config", "gpu=none", "candidates_without_gpu=all")
    every = compiled_jobs(planned_jobs(output(proc)))
    assert every == sorted((n, v.id) for n, st in project.studies.items() for v in st.jobs())


# Plans the DAG of a machine with two H200s: NVML's answer is replaced before Snakemake
# loads the Snakefile (whose `from kernelbook import gpu` then finds the patched module).
AS_IF_GPU = """
import sys
from kernelbook import gpu
gpu.detect = lambda: (gpu.GpuInfo(("NVIDIA H200", "NVIDIA H200"), ("GPU-a", "GPU-b"), "580"), "")
from snakemake.cli import main
sys.argv = ["snakemake", *sys.argv[1:]]
main()
"""


TIMED_RULES = ("bench", "bench_candidates", "bench_tuned_sweep")


def test_gpu_dag_tunes_then_sweeps_the_winner(repo_copy):
    proc = run_in(repo_copy, ["-c", AS_IF_GPU, "-n", "tables"], timeout=300)
    assert proc.returncode == 0, output(proc)
    jobs = planned_jobs(output(proc))
    study = cfg.load_project_file(repo_copy / "config" / "config.yaml").study("sgemm")
    tuned = sorted(v.id for v in study.variants if v.is_tuned)
    assert tuned == [
        "09_autotuned", "10_warptiling", "12_best", "13_async_kmajor", "14_triton", "16_async_b",
        "17_async_b_wide",
    ]  # fmt: skip

    def by(rule):
        return sorted(w["variant"] for r, w in jobs if r == rule and w["study"] == "sgemm")

    plain = sorted(v.id for v in study.variants if not v.is_tuned)
    assert by("bench") == plain  # a job a plain variant
    assert by("bench_candidates") == tuned  # a tuned variant's candidates: one job
    assert by("select_tuned") == tuned
    assert by("bench_tuned_sweep") == tuned  # each winner runs at the other sizes
    # one profile job and one sanitize job a study: its variants in one ncu run, and in one
    # process a sanitizer tool
    studies = sorted(cfg.load_project_file(repo_copy / "config" / "config.yaml").studies)
    assert sorted(w["study"] for r, w in jobs if r == "profile") == studies
    assert sorted(w["study"] for r, w in jobs if r == "sanitize") == studies
    assert {w["gpu"] for r, w in jobs if "gpu" in w} == {"nvidia-h200"}
    assert not [r for r, _ in jobs if r in ("worklog", "study_figures", "publish")]
    # a host-timed job (regimes: every core) runs as soon as it is ready, above any four of
    # the other GPU jobs together; a kernel-timed one keeps the bench's priority
    prio = {}
    current = None
    for line in output(proc).splitlines():
        if line.startswith(("rule ", "localrule ")):
            current = line.split()[1].rstrip(":")
        elif line.strip().startswith("output:") and current in TIMED_RULES:
            study = line.split("results/nvidia-h200/", 1)[1].split("/", 1)[0]
        elif line.strip().startswith("priority:") and current in TIMED_RULES:
            prio.setdefault(study, set()).add(int(line.split(":")[1]))
    assert prio["regimes"] == {100}
    assert all(p == {10} for s, p in prio.items() if s != "regimes"), prio


def test_the_host_timed_target_plans_only_the_host_timed_benches(repo_copy):
    # tools/gpu-session.sh makes it first, while every core is free
    proc = run_in(repo_copy, ["-c", AS_IF_GPU, "-n", "host_timed"], timeout=300)
    assert proc.returncode == 0, output(proc)
    jobs = planned_jobs(output(proc))
    project = cfg.load_project_file(repo_copy / "config" / "config.yaml")
    host = sorted(n for n, st in project.studies.items() if st.timing.get("method") == "host")
    assert host == ["regimes"]
    timed = sorted(w["variant"] for r, w in jobs if r in TIMED_RULES)
    assert timed == sorted(v.id for v in project.study("regimes").variants)
    assert {w["study"] for r, w in jobs if "study" in w} == {"regimes"}
    assert not [r for r, _ in jobs if r in ("profile", "sanitize", "device", "measurements")]
    session = (REPO / "tools" / "gpu-session.sh").read_text()
    assert session.index("host_timed tables") > 0  # before the rest, in the same loop


def test_full_run_without_gpu(built_repo):
    root, proc = built_repo
    assert proc.returncode == 0, output(proc)
    notes = [line for line in proc.stderr.splitlines() if "no GPU here" in line]
    assert len(notes) == 1, proc.stderr
    assert notes[0].startswith("kernelbook: no GPU here (")
    assert "compiling only" in notes[0] and "sgemm" in notes[0]

    ids = job_ids(root)
    build_table = root / "results" / "build" / "sgemm" / "build.parquet"
    df = tables.read(build_table)
    assert sorted(df["variant"]) == sorted(ids)
    assert len(df) == len(ids)
    assert (df["study"] == "sgemm").all()
    assert (df["registers"] > 0).all()
    plain = df[df["variant"].isin(["01_naive", "02_coalescing"])]
    assert len(plain) == 2 and (plain["spill_store_bytes"] == 0).all()
    # nvcc builds for the config's sm_90; Triton for capability 9.0 builds sm_90a code
    assert (df.loc[df["kind"] == "cuda", "arch"] == "sm_90").all()
    assert (df.loc[df["kind"] == "triton", "arch"] == "sm_90a").all()
    assert df["source_sha256"].str.fullmatch(r"[0-9a-f]{64}").all()
    cuda = df["kind"] == "cuda"
    assert cuda.any() and (df.loc[cuda, "nvcc_flags"].str.startswith("-O3 -lineinfo")).all()
    # a Triton variant is compiled by Triton, not nvcc: no flags, Triton's version instead
    triton = df["kind"] == "triton"
    assert triton.any() and (df.loc[triton, "nvcc_flags"] == "").all()
    assert df.loc[triton, "nvcc_version"].str.startswith("triton").all()

    sass = tables.read(root / "results" / "build" / "sgemm" / "sass.parquet")
    assert sorted(set(sass["variant"])) == sorted(ids)
    assert (sass["count"] > 0).all()
    for vid in ids:
        ops = set(sass.loc[sass["variant"] == vid, "op"])
        assert {"FFMA", "LDG", "STG"} <= ops, (vid, ops)
        counted = sass.loc[sass["variant"] == vid, "count"].sum()
        assert counted == df.loc[df["variant"] == vid, "sass_instructions"].iloc[0]
        vdir = root / "results" / "build" / "sgemm" / vid
        assert (vdir / "kernel.cubin").read_bytes()[:4] == b"\x7fELF"
        assert sorted(p.name for p in vdir.iterdir()) == [
            "build.parquet",
            "kernel.cubin",
            "sass.parquet",
        ]
        log = (root / "results" / "logs" / "sgemm" / "compile" / f"{vid}.log").read_text()
        assert f"sgemm/{vid}:" in log and "registers" in log
    # nothing measured on a machine without a GPU
    assert sorted(p.name for p in (root / "results").iterdir()) == ["benchmarks", "build", "logs"]


def test_second_run_does_nothing(built_repo, nogpu_args):
    root, first = built_repo
    assert first.returncode == 0, output(first)
    proc = snakemake(root, "--cores", "2", "all", *nogpu_args)
    assert proc.returncode == 0, output(proc)
    assert "Nothing to be done" in output(proc)


def test_editing_a_kernel_reruns_only_its_compile(clone_built, nogpu_args):
    src = clone_built / "kernels" / "sgemm" / "02_coalescing.cu"
    edit(src, src.read_text() + "\n// a comment: the source changed\n")
    proc = snakemake(clone_built, "-n", "all", *nogpu_args)
    assert proc.returncode == 0, output(proc)
    jobs = planned_jobs(output(proc))
    assert compiled_variants(jobs) == ["02_coalescing"]
    assert {rule for rule, _ in jobs} == {"compile", *GATHERS}


def test_touching_a_kernel_reruns_at_most_its_compile(clone_built, nogpu_args):
    # Snakemake 9 compares the checksum of an input that is only newer: an unchanged file
    # reruns nothing; a changed one (test above) reruns its variant. Never other variants.
    src = clone_built / "kernels" / "sgemm" / "01_naive.cu"
    later = time.time() + 2
    os.utime(src, (later, later))
    proc = snakemake(clone_built, "-n", "all", *nogpu_args)
    assert proc.returncode == 0, output(proc)
    jobs = planned_jobs(output(proc))
    assert compiled_variants(jobs) in ([], ["01_naive"])
    assert {rule for rule, _ in jobs} <= {"compile", *GATHERS}


def test_changing_a_variants_config_reruns_only_its_compile(clone_built, nogpu_args):
    path = clone_built / "config" / "studies" / "sgemm.yaml"
    data = yaml.safe_load(path.read_text())
    for v in data["variants"]:
        if v["id"] == "01_naive":
            v["nvcc_flags"] = ["-Xptxas", "-O2"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = snakemake(clone_built, "-n", "all", *nogpu_args)
    assert proc.returncode == 0, output(proc)
    jobs = planned_jobs(output(proc))
    assert compiled_variants(jobs) == ["01_naive"]
    assert {rule for rule, _ in jobs} == {"compile", *GATHERS}


def test_adding_a_variant_adds_only_its_jobs(clone_built, nogpu_args):
    root = clone_built
    shutil.copy(
        root / "kernels" / "sgemm" / "01_naive.cu", root / "kernels" / "sgemm" / "50_extra.cu"
    )
    path = root / "config" / "studies" / "sgemm.yaml"
    data = yaml.safe_load(path.read_text())
    data["variants"].append(
        {
            "id": "50_extra",
            "entry": "sgemm_naive",
            "defines": {"BS": 16},
            "grid": ["cdiv(M, BS)", "cdiv(N, BS)"],
            "block": ["BS", "BS"],
            "says": "01 with 16x16 blocks",
        }
    )
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    before = job_ids(root)
    assert "50_extra" in before

    proc = snakemake(root, "-n", "all", *nogpu_args)
    assert proc.returncode == 0, output(proc)
    jobs = planned_jobs(output(proc))
    assert compiled_variants(jobs) == ["50_extra"]
    assert {rule for rule, _ in jobs} == {"compile", *GATHERS}

    proc = snakemake(root, "--cores", "2", "all", *nogpu_args)
    assert proc.returncode == 0, output(proc)
    df = tables.read(root / "results" / "build" / "sgemm" / "build.parquet")
    assert sorted(df["variant"]) == sorted(before)
    assert "-DBS=16" in df.loc[df["variant"] == "50_extra", "nvcc_command"].iloc[0]


def test_config_gpu_none(repo_copy):
    proc = snakemake(repo_copy, "-n", "all", "--config", "gpu=none")
    assert proc.returncode == 0, output(proc)
    notes = [line for line in proc.stderr.splitlines() if "no GPU here" in line]
    studies = ", ".join(cfg.load_project_file(repo_copy / "config" / "config.yaml").studies)
    assert notes == [
        "kernelbook: no GPU here (config says gpu: none): compiling only; bench, device, "
        f"profile and sanitize skipped for {studies}"
    ]
    assert studies.startswith("sgemm, transpose, softmax, softmax_bf16, hgemm, attention")
    jobs = planned_jobs(output(proc))
    assert compiled_jobs(jobs) == all_job_ids(repo_copy)
    assert {rule for rule, _ in jobs} == {"compile", *GATHERS}


def test_config_gpu_none_real_run(built_repo):
    root, proc = built_repo  # run with --config gpu=none
    assert proc.returncode == 0, output(proc)
    assert "no GPU here (config says gpu: none)" in proc.stderr
    for study in cfg.load_project_file(root / "config" / "config.yaml").studies:
        df = tables.read(root / "results" / "build" / study / "build.parquet")
        assert sorted(df["variant"]) == sorted(job_ids(root, study))


def test_settings_that_do_not_touch_the_build_rerun_no_compile(clone_built):
    proc = snakemake(clone_built, "-n", "all", "--config", "gpu=none")
    assert proc.returncode == 0, output(proc)
    assert compiled_variants(planned_jobs(output(proc))) == []


@pytest.mark.parametrize(
    "change, args, expect",
    [
        (lambda t: t + "\nbogus: 1\n", [], ["sgemm.yaml: (top level): unknown key", "bogus"]),
        (
            lambda t: t.replace(
                'grid: ["cdiv(M, BS)", "cdiv(N, BS)"]', "grid: [cdiv(M, BS), cdiv(N, BS)]"
            ),
            [],
            ["sgemm.yaml: variants[0] (01_naive).grid", "cut at their commas", "quote"],
        ),
        (
            lambda t: t.replace("block: [BS, BS]\n", "block: [BS, BS]\n    colour: red\n"),
            [],
            ["sgemm.yaml: variants[0] (01_naive): unknown key ('colour' was unexpected)"],
        ),
        (
            # passed a dry run and a whole no-GPU run before: the launch was checked on a GPU
            lambda t: t.replace("block: [BS, BS]\n", "block: [2048]\n"),
            [],
            ["sgemm.yaml: variants[0] (01_naive): block [2048, 1, 1] has 2048 threads", "M=128"],
        ),
        (
            lambda t: t,
            ["--config", "arch=sm90"],
            ["kernelbook: config/config.yaml with --config: arch: 'sm90' does not"],
        ),
        (
            lambda t: t.replace("{M: [128, 256", "{M: [-1, 256"),
            [],
            ["config/studies/sgemm.yaml: sizes[0].M[0]: -1 is negative: a size is a positive"],
        ),
        (lambda t: t + "\n  - [oops\n", [], [r"config/studies/sgemm.yaml: not valid YAML (line"]),
        (
            lambda t: t,
            ["--config", "timeouts={sanitizer_s: 45}"],
            ["timeouts.sanitizer_s: '45' is not of type 'number'", "--configfile FILE"],
        ),
    ],
    ids=[
        "unknown key",
        "unquoted grid",
        "unknown variant key",
        "2048 threads",
        "global key",
        "negative size",
        "study yaml",
        "nested --config",
    ],
)
def test_broken_config_stops_snakemake_with_one_line(repo_copy, change, args, expect):
    path = repo_copy / "config" / "studies" / "sgemm.yaml"
    text = path.read_text()
    path.write_text(change(text))
    proc = snakemake(repo_copy, "-n", "all", *args)
    assert proc.returncode != 0
    out = output(proc)
    said = [line for line in proc.stderr.splitlines() if line.startswith("kernelbook: ")]
    assert len(said) == 1, out
    assert said[0].startswith("kernelbook: config"), out
    for e in expect:
        assert e in said[0], out
    # one message, no Python frames or exception names
    assert "Traceback" not in out and 'File "' not in out and "Error" not in out, out
    assert not (repo_copy / "results").exists()


@pytest.mark.parametrize(
    "change, expect",
    [
        (lambda t: t + "\ntiming: [oops\n", "config/config.yaml: not valid YAML (line"),
        (lambda t: t.replace("\nseed: ", "\nseed: abc #"), "config/config.yaml: seed: 'abc'"),
    ],
    ids=["yaml", "schema"],
)
def test_a_broken_config_file_is_named_with_its_line(repo_copy, change, expect):
    path = repo_copy / "config" / "config.yaml"
    path.write_text(change(path.read_text()))
    proc = snakemake(repo_copy, "-n", "all")
    said = [line for line in proc.stderr.splitlines() if line.startswith("kernelbook: ")]
    assert proc.returncode != 0 and len(said) == 1, output(proc)
    assert said[0].startswith(f"kernelbook: {expect}"), output(proc)
    assert "Traceback" not in output(proc)


def test_a_nested_key_from_a_config_file_keeps_its_type(repo_copy):
    (repo_copy / "over.yaml").write_text("timeouts:\n  sanitizer_s: 45\n")
    proc = snakemake(repo_copy, "-n", "all", "--configfile", "config/config.yaml", "over.yaml")
    assert proc.returncode == 0, output(proc)


# ------------------------------------------------------------------------------------------
# The CLI


def test_cli_list(repo_copy):
    proc = kernelbook_cli(repo_copy, "list")
    assert proc.returncode == 0, output(proc)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("sgemm: gemm float32, baseline cublas, 9 sizes: 128x128x128, ")
    assert lines[0].endswith("4096x4096x1000, 3000x3000x3000")
    listed = [line.split()[0] for line in lines[1:] if line.startswith("  ")]
    project = cfg.load_project_file(repo_copy / "config" / "config.yaml")
    assert listed[: len(project.study("sgemm").variants)] == [
        v.id for v in project.study("sgemm").variants
    ]
    assert "sgemm_naive" in proc.stdout


def test_cli_list_takes_any_study_file(repo_copy):
    """controls is not in config.yaml's studies: list reads its file all the same."""
    proc = kernelbook_cli(repo_copy, "list", "controls")
    assert proc.returncode == 0, output(proc)
    assert proc.stdout.startswith("controls: gemm float32, baseline cublas")
    assert "94_crash" in proc.stdout


def test_an_installed_package_runs_from_outside_the_checkout(tmp_path):
    """pip install . (not editable): the schemas ship in the package, and nothing is looked
    up beside it in a source tree; list and check run against the checkout's config."""
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(site), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    assert (site / "kernelbook" / "schemas" / "study.schema.yaml").is_file()
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("SNAKEMAKE_PROFILE", None)
    away = tmp_path / "elsewhere"
    away.mkdir()
    config = str(REPO / "config" / "config.yaml")
    for args in (["list", "sgemm"], ["check"]):
        proc = subprocess.run(
            [sys.executable, "-m", "kernelbook", "--configfile", config, *args],
            cwd=away, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode in (0, 1), proc.stderr  # check exits 1 on a stale study
        assert "Traceback" not in proc.stderr, proc.stderr
    listed = subprocess.run(
        [sys.executable, "-c", "import kernelbook; print(kernelbook.__file__)"],
        cwd=away, env=env, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert listed.startswith(str(site)), listed


def test_cli_compile(repo_copy, tmp_path):
    out = tmp_path / "out"
    proc = kernelbook_cli(
        repo_copy,
        "compile",
        "sgemm",
        "01_naive",
        "--cubin",
        str(out / "k.cubin"),
        "--build",
        str(out / "build.parquet"),
        "--sass",
        str(out / "sass.parquet"),
    )
    assert proc.returncode == 0, output(proc)
    assert "sgemm/01_naive: " in proc.stderr and " registers, " in proc.stderr
    row = tables.read(out / "build.parquet").iloc[0]
    assert row["variant"] == "01_naive" and row["registers"] > 0
    assert row["cubin_sha256"] == hashlib.sha256((out / "k.cubin").read_bytes()).hexdigest()
    sass = tables.read(out / "sass.parquet")
    assert sass["count"].sum() == row["sass_instructions"]


def test_cli_compile_a_study_not_in_the_config(repo_copy, tmp_path):
    proc = kernelbook_cli(
        repo_copy,
        "compile",
        "controls",
        "93_race",
        "--cubin",
        str(tmp_path / "k.cubin"),
        "--build",
        str(tmp_path / "build.parquet"),
    )
    assert proc.returncode == 0, output(proc)
    row = tables.read(tmp_path / "build.parquet").iloc[0]
    assert row["study"] == "controls" and row["smem_static_bytes"] == 8192


@pytest.mark.parametrize(
    "args, expect",
    [
        (["compile", "sgemm", "99_nope", "--cubin", "k.cubin"], ["99_nope", "01_naive"]),
        (["compile", "nostudy", "01_naive", "--cubin", "k.cubin"], ["nostudy.yaml"]),
        (["list", "nostudy"], ["nostudy"]),
        (["bench", "sgemm", "10_warptiling"], ["10_warptiling", "autotuned", "--tuned-table"]),
        (["bench", "sgemm", "01_naive", "99_nope"], ["99_nope", "01_naive"]),
        (["bench", "sgemm", "01_naive", "12_best"], ["12_best autotuned", "alone"]),
        (["bench", "sgemm", "01_naive", "02_coalescing", "--cubin", "k.cubin"], ["--cubin", "one"]),
    ],
    ids=[
        "bad variant", "bad study", "list bad study", "tuned without its table",
        "several, one unknown", "several, one tuned", "several with one's cubin",
    ],
)  # fmt: skip
def test_cli_errors_are_one_line(repo_copy, args, expect):
    proc = kernelbook_cli(repo_copy, *args)
    assert proc.returncode == 1, output(proc)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("kernelbook: error: ")
    for e in expect:
        assert e in lines[0]
    assert not (repo_copy / "k.cubin").exists()


def test_cli_compile_error(repo_copy, tmp_path):
    src = repo_copy / "kernels" / "sgemm" / "01_naive.cu"
    src.write_text(src.read_text() + "\nthis is not C++;\n")
    proc = kernelbook_cli(
        repo_copy, "compile", "sgemm", "01_naive", "--cubin", str(tmp_path / "out" / "k.cubin")
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("kernelbook: error: sgemm/01_naive: nvcc failed")
    assert "this is not C++" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_run_resumes_on_a_fresh_checkout_from_its_snapshot(clone_built, tmp_path, nogpu_args):
    """tools/snapshot.sh of a run cut short (a compile job and its study's gathers not made),
    restored by tools/restore-snapshot.py into a fresh checkout (every file newer than the
    snapshot): Snakemake then plans only the missing job and what gathers it, and a kernel
    edited since also its own. A snapshot without Snakemake's records is refused by name,
    restoring nothing; one of another commit is restored with a note."""
    env = {**os.environ, "KERNELBOOK_GIT_COMMIT": "c0ffee"}
    shutil.copytree(REPO / "tools", clone_built / "tools")
    # cut short: one compile job's outputs, and the tables that gather the study's, not made
    build = clone_built / "results" / "build" / "sgemm"
    shutil.rmtree(build / "02_coalescing")
    for table in ("build.parquet", "sass.parquet"):
        (build / table).unlink()
    snap = tmp_path / "snap"
    proc = subprocess.run(
        ["bash", str(clone_built / "tools" / "snapshot.sh"), str(snap)],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    names = {p.name for p in snap.iterdir()}
    assert names == {"results.txz", "build.txz", "state.txz", "snapshot.json"}, names
    fresh = tmp_path / "fresh"
    shutil.copytree(
        clone_built, fresh, symlinks=True, ignore=shutil.ignore_patterns("results", ".snakemake")
    )
    now = time.time()
    for p in fresh.rglob("*"):
        if p.is_file() and not p.is_symlink():
            os.utime(p, (now, now))
    restore = [sys.executable, str(fresh / "tools" / "restore-snapshot.py")]
    partial = tmp_path / "partial"
    shutil.copytree(snap, partial, ignore=shutil.ignore_patterns("state.txz"))
    refused = subprocess.run([*restore, str(partial)], env=env, capture_output=True, text=True)
    assert refused.returncode == 1 and "no state.txz" in refused.stderr, refused.stderr
    assert not (fresh / "results" / "build").exists()
    other = {**env, "KERNELBOOK_GIT_COMMIT": "beef"}
    proc = subprocess.run([*restore, str(snap)], env=other, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "made at commit c0ffee, this checkout is beef" in proc.stdout, proc.stdout
    proc = snakemake(fresh, "-n", "all", *nogpu_args)
    assert proc.returncode == 0, output(proc)
    jobs = planned_jobs(output(proc))
    assert compiled_variants(jobs) == ["02_coalescing"], output(proc)[-3000:]
    assert {rule for rule, _ in jobs} <= {"compile", *GATHERS}, jobs
    src = fresh / "kernels" / "sgemm" / "01_naive.cu"
    edit(src, src.read_text() + "\n// edited after the snapshot\n")
    jobs = planned_jobs(output(snakemake(fresh, "-n", "all", *nogpu_args)))
    assert compiled_variants(jobs) == ["01_naive", "02_coalescing"], jobs
