"""A broken variant is recorded, not fatal: failed rows, the study's tables and page still
made, and a gate per study that fails the run at its end; every external tool is bounded
by a timeout that kills its whole process group. (GPU parts: tests/test_gpu.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import REPO, copy_env, copy_repo, kernelbook_cli, snakemake

from kernelbook import gate, tables
from kernelbook.procs import ToolTimeout, run_tool
from kernelbook.report import worklog

# ------------------------------------------------------------------------------------------
# The timeout helper

TREE = """
import subprocess, sys, time
# a child that starts a grandchild, both sleeping; their pids go to the file named in argv[1]
kid = subprocess.Popen([sys.executable, "-c",
    "import subprocess,sys,time\\n"
    "g = subprocess.Popen(['sleep', '300'])\\n"
    "open(sys.argv[1], 'a').write(f'{g.pid}\\\\n')\\n"
    "time.sleep(300)", sys.argv[1]])
open(sys.argv[1], "a").write(f"{kid.pid}\\n")
print("tree started", flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie is dead, only not yet reaped by its new parent


def test_timeout_kills_the_whole_process_group(tmp_path):
    pids = tmp_path / "pids"
    cmd = [sys.executable, "-c", TREE, str(pids)]
    start = time.monotonic()
    with pytest.raises(ToolTimeout) as e:
        run_tool(cmd, timeout=3, what="sgemm/01_naive at 64x64x64", setting="timeouts.ncu_s")
    took = time.monotonic() - start
    assert took < 3 + 5 + 5, took  # the limit, the SIGTERM grace, slack
    msg = str(e.value)
    assert msg.startswith("sgemm/01_naive at 64x64x64: python")
    assert "still running after 3 s (timeouts.ncu_s)" in msg and "process group" in msg
    assert e.value.kind == "hang" and e.value.timeout == 3
    assert "tree started" in e.value.output
    children = [int(x) for x in pids.read_text().split()]
    assert len(children) == 2  # the child and the grandchild were running
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in children if _alive(p)], "a process of the tool's group survived"


def test_a_tool_within_its_time_returns_its_output():
    proc = run_tool(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"],
        timeout=60,
        what="x",
        setting="timeouts.nvcc_s",
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "out\n", "err\n")


def test_a_hanging_nvcc_becomes_a_compile_error(tmp_path, monkeypatch):
    """nvcc past timeouts.nvcc_s: a CompileError naming the variant, the tool and the key."""
    from kernelbook import config as cfg
    from kernelbook.build import nvcc as build

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvcc").write_text("#!/bin/sh\nsleep 300 &\nwait\n")
    (fake / "nvcc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    project = cfg.load_project_file(REPO / "config" / "config.yaml")
    v = project.study("sgemm").variant("01_naive")
    start = time.monotonic()
    with pytest.raises(build.CompileError) as e:
        build.compile_variant(v, "sm_90", [], REPO, tmp_path / "k.cubin", timeout=1)
    assert time.monotonic() - start < 15
    assert str(e.value).startswith("sgemm/01_naive: nvcc still running after 1 s (timeouts.nvcc_s)")
    assert not list(tmp_path.glob("k.cubin*"))


def test_timeouts_are_settings_with_defaults():
    from kernelbook import config as cfg

    project = cfg.load_project_file(
        REPO / "config" / "config.yaml", overrides={"timeouts": {"ncu_s": 5}}
    )
    t = project.settings["timeouts"]
    assert t["ncu_s"] == 5 and t["nvcc_s"] > 0 and t["sanitizer_s"] > 0 and t["launch_s"] > 0
    with pytest.raises(cfg.ConfigError, match="timeouts"):
        cfg.load_project_file(REPO / "config" / "config.yaml", overrides={"timeouts": {"ncu_s": 0}})


# ------------------------------------------------------------------------------------------
# The gate as a function of the tables


def _meas(rows):
    base = {"variant_kind": "variant", "status": "ok", "reason": None, "failure": None}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_gate_separates_expected_from_unexpected_failures():
    m = _meas(
        [
            {"variant": "02_good", "size": "256"},
            {
                "variant": "90_wrong",
                "size": "256",
                "status": "failed",
                "failure": "wrong",
                "reason": "wrong: 90_wrong at 256 exceeds the tolerance",
            },
            {
                "variant": "94_crash",
                "size": "256",
                "status": "failed",
                "failure": "hang",
                "reason": "hang: still running after 10 s",
            },
            {"variant": "91_nan", "size": "256"},  # a control that passed
            {
                "variant": "93_race",
                "size": "256",
                "status": "failed",
                "failure": "wrong",
                "reason": "wrong: ...",
            },  # the sanitizer's to catch: any bench outcome
            {
                "variant": "03_broken",
                "size": "256",
                "status": "failed",
                "failure": "compile",
                "reason": "compile: nvcc failed: error: expected a declaration",
            },
            {"variant": "03_broken", "size": "512", "status": "skipped", "reason": "requires"},
            {
                "variant": "09_t__BM64",
                "size": "256",
                "variant_kind": "candidate",
                "status": "failed",
                "failure": "launch",
                "reason": "launch: too much smem",
            },
        ]
    )
    profile = pd.DataFrame(
        [
            {
                "variant": "02_good",
                "size": "256",
                "status": "failed",
                "failure": "hang",
                "reason": "ncu still running after 900 s (timeouts.ncu_s)",
            },
            {
                "variant": "90_wrong",
                "size": "256",
                "status": "not_run",
                "failure": "wrong",
                "reason": "not profiled",
            },
            {  # the baseline, profiled beside the variants: not a failure of the study's
                "variant": "baseline:cublas",
                "size": "256",
                "status": "failed",
                "failure": "tool",
                "reason": "ncu failed",
            },
        ]
    )
    expects = {
        "02_good": None,
        "90_wrong": "wrong",
        "94_crash": "crash",
        "91_nan": "nonfinite",
        "93_race": "race",
        "03_broken": None,
    }
    found = gate.failures("controls", expects, measurements=m, profile=profile)
    got = {(f.variant, f.stage, f.kind): f.expected for f in found}
    assert got == {
        ("90_wrong", "bench", "wrong"): True,
        ("94_crash", "bench", "hang"): False,  # failed, but not the way it declares
        ("91_nan", "bench", "passed"): False,  # a control that passes is a harness bug
        ("93_race", "bench", "wrong"): True,
        ("03_broken", "bench", "compile"): False,
        ("02_good", "profile", "hang"): False,
    }
    text = gate.summary("controls", found, "results/x/controls/measurements.parquet")
    lines = text.splitlines()
    assert lines[0] == (
        "controls: 4 unexpected failure(s), 2 expected (negative controls); the rows are in "
        "results/x/controls/measurements.parquet"
    )
    assert len(lines) == 5
    assert "controls/94_crash 256 [bench] hang: declared expect: crash, but failed as hang" in text
    assert "controls/03_broken 256 [bench] compile: nvcc failed: error: expected a" in text
    assert "controls/91_nan 256 [bench] passed" in text
    assert "09_t__BM64" not in text  # tuning tolerates failed candidates
    assert all(len(line) <= 165 for line in lines)


def test_gate_passes_a_study_whose_controls_all_fail_as_declared():
    m = _meas(
        [
            {"variant": "02_good", "size": "256"},
            {
                "variant": "95_hang",
                "size": "256",
                "status": "failed",
                "failure": "hang",
                "reason": "hang: ...",
            },
            {
                "variant": "95_hang",
                "size": "1000",
                "status": "failed",
                "failure": "hang",
                "reason": "hang: not run: the hang at 256 ended the job's use of the GPU",
            },
        ]
    )
    found = gate.failures("c", {"02_good": None, "95_hang": "hang"}, measurements=m)
    assert [f.expected for f in found] == [True, True]
    assert (
        gate.failures(
            "c", {"02_good": None}, measurements=_meas([{"variant": "02_good", "size": "1"}])
        )
        == []
    )


def test_gate_without_measurements_reads_the_build_table():
    build = pd.DataFrame(
        [
            {"variant": "01_naive", "tuned_from": None, "status": "ok", "reason": None},
            {
                "variant": "02_broken",
                "tuned_from": None,
                "status": "failed",
                "reason": "compile: sgemm/02_broken: nvcc failed",
            },
            {"variant": "09__BM64", "tuned_from": "09", "status": "failed", "reason": "x"},
        ]
    )
    found = gate.failures("sgemm", {}, build=build)
    assert [(f.variant, f.stage, f.expected) for f in found] == [("02_broken", "compile", False)]
    # a build table from before the status column: nothing to report
    assert gate.failures("sgemm", {}, build=build.drop(columns=["status"])) == []


def test_sanitize_gate_honours_expect():
    t = pd.DataFrame(
        [
            {
                "variant": "92_oob",
                "size": "100",
                "tool": "memcheck",
                "verdict": "expected",
                "errors": 3,
                "warnings": 0,
                "first_finding": "Invalid __global__ write",
            },
            {
                "variant": "93_race",
                "size": "100",
                "tool": "racecheck",
                "verdict": "clean",
                "errors": 0,
                "warnings": 0,
                "first_finding": None,
            },
            {
                "variant": "95_hang",
                "size": "100",
                "tool": "memcheck",
                "verdict": "not_run",
                "errors": 0,
                "warnings": 0,
                "first_finding": "not run",
            },
            {
                "variant": "02_good",
                "size": "100",
                "tool": "memcheck",
                "verdict": "hang",
                "errors": 0,
                "warnings": 0,
                "first_finding": "killed after 600 s",
            },
        ]
    )
    expects = {"92_oob": "out_of_bounds", "93_race": "race", "95_hang": "hang"}
    found = gate.failures("controls", expects, sanitizer=t)
    assert [f.line() for f in found if not f.expected] == [
        "controls/93_race 100 [sanitize] passed: declared expect: race (a negative control), "
        "but racecheck found nothing",
        "controls/02_good 100 [sanitize] hang: memcheck ran out of time: killed after 600 s",
    ]
    # 92_oob's findings are the ones it declares (verdict expected) and 95_hang was not
    # run after its bench hang: neither is a failure
    assert len(found) == 2


# ------------------------------------------------------------------------------------------
# The page shows failures first

FIXTURE = REPO / "tests" / "data" / "worklog"


def test_page_shows_failures_at_the_top(tmp_path):
    m = tables.read(FIXTURE / "measurements.parquet")
    sizes = tables.table_sizes(FIXTURE / "measurements.parquet")
    bad = m["variant"] == "02_coalescing"
    m.loc[bad, "status"] = "failed"
    m.loc[bad, "failure"] = "hang"
    m.loc[bad, "reason"] = "hang: sgemm/02_coalescing at M=4096: still running after 60 s"
    for col in ("median_ms", "tflops", "pct_of_baseline"):
        m.loc[bad, col] = None
    tables.write(m, tmp_path / "measurements.parquet", "measurements", sizes)
    paths = {"measurements": tmp_path / "measurements.parquet"}
    for name in ("device", "build", "sass"):
        paths[name] = FIXTURE / f"{name}.parquet"
    data = worklog.load(paths, mode="measured")
    figs = worklog.make_figures(data, tmp_path / "figures")  # what did run is still drawn
    assert any(f.drawn for f in figs)
    page = worklog.render_markdown(data, figs)
    assert page.index("## Failures") < page.index("**Answer") < page.index("## Provenance")
    section = page[page.index("## Failures") : page.index("**Answer")]
    n = int(bad.sum())
    assert f"{n} (variant, size) failed, {n} of them unexpectedly" in section
    assert "| **02_coalescing** |" in section and "| bench | hang | **unexpected** |" in section
    assert "still running after 60 s" in section
    assert "01_naive" not in section
    # nothing failed: no section
    clean = worklog.load({**paths, "measurements": FIXTURE / "measurements.parquet"})
    assert "## Failures" not in worklog.render_markdown(clean, [])


# ------------------------------------------------------------------------------------------
# A real run: one variant of a study does not compile

TINY = {
    "title": "Two variants, one broken",
    "problem": "gemm",
    "dtype": "float32",
    "sizes": [{"M": [64], "N": "M", "K": "M"}],
    "baseline": "cublas",
    "variants": [
        {
            "id": "01_good",
            "entry": "sgemm_naive",
            "defines": {"BS": 32},
            "grid": ["cdiv(M, BS)", "cdiv(N, BS)"],
            "block": ["BS", "BS"],
        },
        {
            "id": "02_broken",
            "entry": "sgemm_naive",
            "defines": {"BS": 32},
            "grid": ["cdiv(M, BS)", "cdiv(N, BS)"],
            "block": ["BS", "BS"],
        },
    ],
}


@pytest.fixture
def tiny_repo(tmp_path):
    root = copy_repo(tmp_path / "repo")
    kernels = root / "kernels" / "tiny"
    kernels.mkdir()
    naive = (REPO / "kernels" / "sgemm" / "01_naive.cu").read_text()
    (kernels / "01_good.cu").write_text(naive)
    (kernels / "02_broken.cu").write_text(naive + "\nthis is not C++;\n")
    (root / "config" / "studies" / "tiny.yaml").write_text(yaml.safe_dump(TINY, sort_keys=False))
    cfgfile = root / "config" / "config.yaml"
    conf = yaml.safe_load(cfgfile.read_text())
    cfgfile.write_text(yaml.safe_dump({**conf, "studies": ["tiny"], "gpu": "none"}))
    # one published worklog, rendered without a GPU: the pages are part of `all`
    src = REPO / "worklogs" / "nvidia-h200" / "transpose"
    dest = root / "worklogs" / "nvidia-h200" / "transpose"
    dest.mkdir(parents=True)
    shutil.copytree(src / "data", dest / "data")
    shutil.copytree(REPO / "analysis", root / "analysis", ignore=shutil.ignore_patterns(".*"))
    return root


def test_a_variant_that_does_not_compile_fails_the_run_at_its_end(tiny_repo):
    root = tiny_repo
    proc = snakemake(root, "--cores", "2", "all", timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    # its compile job succeeded with a failed row, keeping nvcc's message
    log = (root / "results" / "logs" / "tiny" / "compile" / "02_broken.log").read_text()
    assert "kernelbook: error: tiny/02_broken: nvcc failed" in log
    assert "this is not C++" in log and "Traceback" not in log
    assert "Error in rule compile" not in out
    build = tables.read(root / "results" / "build" / "tiny" / "build.parquet")
    rows = build.set_index("variant")
    assert rows.loc["01_good", "status"] == "ok" and rows.loc["01_good", "registers"] > 0
    assert rows.loc["02_broken", "status"] == "failed"
    assert "this is not C++" in rows.loc["02_broken", "reason"]
    assert pd.isna(rows.loc["02_broken", "registers"])
    sass = tables.read(root / "results" / "build" / "tiny" / "sass.parquet")
    assert set(sass["variant"]) == {"01_good"}
    # the rest of the DAG went on: the page was rendered
    page = root / "results" / "nvidia-h200" / "transpose" / "worklog.html"
    assert page.is_file() and page.stat().st_size > 10_000
    # only the gate failed, and the summary closes the output
    failed_rules = {
        line.split()[-1].rstrip(":")
        for line in out.splitlines()
        if line.startswith("Error in rule")
    }
    assert failed_rules == {"build_gate"}, out
    assert not (root / "results" / "build" / "tiny" / "build.ok").exists()
    tail = proc.stderr[proc.stderr.rindex("kernelbook: the run's gates failed:") :]
    assert "tiny: 1 unexpected failure(s)" in tail
    assert "tiny/02_broken - [compile] compile: nvcc failed on kernels/tiny/02_broken.cu" in tail
    assert "02_broken.cu(" in tail and "error: expected a declaration" in tail
    assert len(tail.splitlines()) < 25

    # `tables` says the same; fixing the kernel makes both pass
    again = snakemake(root, "--cores", "2", "tables")
    assert again.returncode != 0 and "tiny/02_broken" in again.stderr
    naive = (REPO / "kernels" / "sgemm" / "01_naive.cu").read_text()
    (root / "kernels" / "tiny" / "02_broken.cu").write_text(naive)
    fixed = snakemake(root, "--cores", "2", "all")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert (
        "no unexpected failures" in (root / "results" / "build" / "tiny" / "build.ok").read_text()
    )
    assert (
        tables.read(root / "results" / "build" / "tiny" / "build.parquet")["status"] == "ok"
    ).all()


def test_cli_compile_without_record_failure_still_fails(tiny_repo, tmp_path):
    proc = kernelbook_cli(
        tiny_repo, "compile", "tiny", "02_broken", "--cubin", str(tmp_path / "k.cubin")
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("kernelbook: error: tiny/02_broken: nvcc failed")
    assert not (tmp_path / "k.cubin").exists()


def test_gate_cli(tmp_path):
    """`kernelbook gate` on a build table: the one-screen message, and the .ok on success."""
    build = tables.read(REPO / "tests" / "data" / "worklog" / "build.parquet")
    ok = tmp_path / "ok.parquet"
    tables.write(build, ok, "build")
    bad = build.copy()
    bad.loc[bad["variant"] == "02_coalescing", ["status", "reason"]] = [
        "failed",
        "compile: sgemm/02_coalescing: nvcc still running after 600 s (timeouts.nvcc_s)",
    ]
    tables.write(bad, tmp_path / "bad.parquet", "build")
    env_run = [sys.executable, "-m", "kernelbook"]
    proc = subprocess.run(
        [
            *env_run,
            "gate",
            "sgemm",
            "--build",
            str(tmp_path / "bad.parquet"),
            "--out",
            str(tmp_path / "bad.ok"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=copy_env(REPO),
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("kernelbook: error: sgemm: 1 unexpected failure(s)")
    assert "sgemm/02_coalescing - [compile] compile: nvcc still running" in proc.stderr
    assert "timeouts.nvcc_s" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "bad.ok").exists()
    proc = subprocess.run(
        [*env_run, "gate", "sgemm", "--build", str(ok), "--out", str(tmp_path / "ok.ok")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=copy_env(REPO),
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ok.ok").read_text() == "sgemm: no unexpected failures\n"


def test_a_tuned_variant_whose_candidates_all_failed_is_a_failure():
    from kernelbook import tune

    def cand(point, size, status, reason=None, median=None):
        return {
            "variant": f"09_x__BM{point}",
            "variant_kind": "candidate",
            "tuned_from": "09_x",
            "tune_point": f'{{"BM": {point}}}',
            "size": size,
            "status": status,
            "reason": reason,
            "failure": None if status != "failed" else reason.split(":")[0],
            "median_ms": median,
            "correct": status == "ok" or None,
        }

    rows = pd.DataFrame(
        [
            cand(64, "256", "ok", median=0.5),
            cand(128, "256", "failed", "launch: too much shared memory"),
            cand(64, "512", "failed", "wrong: exceeds the tolerance"),
            cand(128, "512", "failed", "hang: still running after 60 s"),
            cand(64, "96", "skipped", "requires M % BM == 0"),
            cand(128, "96", "skipped", "requires M % BM == 0"),
        ]
    )
    tuned = tune.select(rows, "09_x")
    tuned = tuned[tuned["variant_kind"] == "tuned"].set_index("size")
    assert tuned.loc["256", "status"] == "ok"
    assert (tuned.loc["512", "status"], tuned.loc["512", "failure"]) == ("failed", "no_winner")
    assert (tuned.loc["96", "status"], tuned.loc["96", "failure"]) == ("skipped", None)
    found = gate.failures("s", {"09_x": None}, measurements=tuned.reset_index())
    assert [(f.variant, f.size, f.kind) for f in found] == [("09_x", "512", "no_winner")]
    assert "wrong: exceeds the tolerance" in found[0].message


_DEAD_CONTEXT_SCRIPT = """
import sys
from kernelbook.measure import bench

class CUDARuntimeError(RuntimeError):  # the name CuPy's runtime errors have
    pass

class Handle:  # a CUDA object whose destructor runs after the context died
    def __init__(self, cls, text):
        self.cls, self.text = cls, text
    def __del__(self):
        raise self.cls(self.text)

Handle(CUDARuntimeError, "cudaErrorMisalignedAddress: before")
print("--- quiet", file=sys.stderr, flush=True)
bench.quiet_dead_context()
bench.quiet_dead_context()  # twice: one hook, not a chain
Handle(CUDARuntimeError, "cudaErrorMisalignedAddress: after")
Handle(ValueError, "a bug in a destructor")
"""


def test_a_dead_context_s_destructor_errors_are_dropped_and_others_kept():
    """After a crash the failed size's CuPy events fail in their destructors; the job's log
    must not fill with those tracebacks (the crash is already a row), while any other error
    a destructor raises is still printed."""
    proc = subprocess.run(
        [sys.executable, "-c", _DEAD_CONTEXT_SCRIPT],
        capture_output=True,
        text=True,
        env=copy_env(REPO),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    before, after = proc.stderr.split("--- quiet")
    assert "Exception ignored" in before and "cudaErrorMisalignedAddress: before" in before
    assert "cudaErrorMisalignedAddress" not in after
    assert after.count("Exception ignored") == 1 and "ValueError: a bug in a destructor" in after
