"""Tests that need a CUDA device (marked gpu; skipped, visibly, where NVML finds none)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CHECK_TIMING, bench_rows, candidate_sample, kb

from kernelbook import gpu, tables

ROOT = Path(__file__).resolve().parents[1]
INFO, WHY = gpu.detect()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}")]

FAST = {"timing": CHECK_TIMING}
PROVENANCE = [
    "gpu_name",
    "gpu_uuid",
    "driver_version",
    "cuda_version",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temperature_c",
    "power_w",
    "throttle_reasons",
    "source_sha256",
    "defines",
    "nvcc_flags",
    "nvcc_version",
    "git_commit",
    "seed",
    "measured_at",
    "baseline_mode",
    "cubin_sha256",
]


def bench(tmp_path, variant, *sizes, settings=FAST, study="sgemm"):
    return bench_rows(tmp_path, settings, study, variant, sizes)


@pytest.mark.parametrize("variant", ["01_naive", "02_coalescing"])
def test_variants_correct_at_odd_sizes(tmp_path, variant):
    df = bench(tmp_path, variant, "127x129x131", "1000", "33x1x65", "64")
    assert list(df["status"]) == ["ok"] * 4
    assert df["correct"].all()
    assert (df["rel_err"] < df["tolerance"]).all()
    assert (df["baseline_rel_err"] < df["tolerance"]).all()
    assert df[PROVENANCE].notna().all().all(), df[PROVENANCE].isna().sum()
    assert (df["gpu_uuid"].str.startswith("GPU-")).all()
    assert (df["n_samples"] >= 10).all()
    assert "TF32 off" in df["baseline_mode"].iloc[0]


@pytest.mark.slow  # a whole Snakemake run: the release tier (-m 'gpu and slow')
def test_negative_controls_caught_while_other_jobs_finish(tmp_path):
    results = tmp_path / "results"
    slug = INFO.slug
    # the bench stage only: the whole study, gates included, is the next test
    targets = [
        str(results / slug / "controls" / "bench" / f"{v}.parquet")
        for v in ("02_coalescing", "90_wrong", "91_nan", "92_oob", "94_crash", "95_hang")
    ]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--cores",
            "1",
            *targets,
            "--config",
            "studies=[controls]",
            f"results={results}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    # a failing variant is recorded as failed rows: every bench job succeeds
    assert proc.returncode == 0, proc.stderr[-3000:]
    good = results / slug / "controls" / "bench" / "02_coalescing.parquet"
    assert tables.read(good)["correct"].all()
    logs = results / "logs" / "controls" / "bench" / slug
    expected = {
        "90_wrong": ("wrong", "exceeds the tolerance"),
        "91_nan": ("nonfinite", "are NaN or Inf"),
        "92_oob": ("out_of_bounds", "wrote outside C"),
        "94_crash": ("crash", "crashed"),
        "95_hang": ("hang", "still running after 10 s"),
    }
    for variant, (kind, needle) in expected.items():
        text = (logs / f"{variant}.log").read_text()
        assert needle in text, f"{variant}: {text[-2000:]}"
        assert f"controls/{variant} at M=" in text
        assert "Traceback" not in text, text
        df = tables.read(results / slug / "controls" / "bench" / f"{variant}.parquet")
        assert list(df["size"]) == ["256x256x256", "1000x1000x1000"], df
        assert (df["status"] == "failed").all(), df[["size", "status", "reason"]]
        assert (df["failure"] == kind).all(), (variant, list(df["failure"]), list(df["reason"]))
        assert needle in df["reason"].iloc[0]
        assert df["median_ms"].isna().all() and df["gpu_uuid"].notna().all()


def _copy_with_analysis(dest: Path) -> Path:
    import shutil

    from conftest import copy_repo

    root = copy_repo(dest)
    shutil.copytree(ROOT / "analysis", root / "analysis", ignore=shutil.ignore_patterns(".*"))
    return root


def _snakemake_in(root: Path, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    from conftest import copy_env

    # the copy's src first, the rest of the path kept (where snakemake may be installed apart)
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=root,
        env=copy_env(root),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow  # a whole Snakemake run: the release tier (-m 'gpu and slow')
def test_controls_study_passes_its_gates_when_every_control_fails_as_declared(tmp_path):
    """The whole controls study, page and gates included: each control fails the way its
    `expect` says (at the bench or under the sanitizer), so every gate passes."""
    root = _copy_with_analysis(tmp_path / "repo")
    proc = _snakemake_in(root, "--cores", "1", "all", "--config", "studies=[controls]")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    base = root / "results" / INFO.slug / "controls"
    ok = (base / "bench.ok").read_text()
    assert "no unexpected failures" in ok and "controls/95_hang" in ok and "90_wrong" in ok
    assert (base / "sanitize.ok").is_file()
    san = tables.read(base / "sanitizer.parquet")
    verdict = {(r.variant, r.tool): r.verdict for r in san.itertuples()}
    assert verdict[("92_oob", "memcheck")] == "expected"
    assert verdict[("93_race", "racecheck")] == "expected"
    assert verdict[("95_hang", "memcheck")] == "not_run"  # a hang is not run again
    page = (base / "worklog.md").read_text()
    assert "## Failures" in page and "all as their negative control expects" in page


MIXED = {
    "title": "One correct, one wrong, one hanging variant",
    "problem": "gemm",
    "dtype": "float32",
    "sizes": [{"M": [256, 1000], "N": "M", "K": "M"}],
    "baseline": "cublas",
    "sanitize": {"size": {"M": 100, "N": 100, "K": 100}},
    "timing": {"min_time_s": 0.02, "max_time_s": 2, "launch_timeout_s": 10},
    "variants": [
        {
            "id": "02_coalescing",
            "source": "kernels/sgemm/02_coalescing.cu",
            "entry": "sgemm_coalescing",
            "defines": {"BS": 32},
            "grid": ["cdiv(N, BS)", "cdiv(M, BS)"],
            "block": ["BS * BS"],
        },
        {
            "id": "90_wrong",
            "source": "kernels/controls/90_wrong.cu",
            "entry": "control_wrong",
            "grid": ["cdiv(N, 32)", "cdiv(M, 32)"],
            "block": [1024],
        },
        {
            "id": "95_hang",
            "source": "kernels/controls/95_hang.cu",
            "entry": "control_hang",
            "grid": [1],
            "block": [32],
        },
    ],
}


@pytest.mark.slow  # a whole Snakemake run: the release tier (-m 'gpu and slow')
def test_a_wrong_and_a_hanging_variant_do_not_hide_the_study(tmp_path):
    """Items 8 and 9 of issue 19: the study's tables and page are made, every job ends, and
    the run exits non-zero with the gate's summary at its end."""
    import time

    import yaml

    root = _copy_with_analysis(tmp_path / "repo")
    (root / "config" / "studies" / "mixed.yaml").write_text(yaml.safe_dump(MIXED))
    cfgfile = root / "config" / "config.yaml"
    conf = yaml.safe_load(cfgfile.read_text())
    # ncu and the sanitizer would meet the hang only through a bug: short limits all the same
    conf.update(studies=["mixed"], timeouts={"ncu_s": 120, "sanitizer_s": 120})
    cfgfile.write_text(yaml.safe_dump(conf))
    start = time.monotonic()
    proc = _snakemake_in(root, "--cores", "1", "all")
    took = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-6000:]
    assert took < 1200, took
    base = root / "results" / INFO.slug / "mixed"
    for name in ("measurements", "profile", "roofline", "sanitizer"):
        assert (base / f"{name}.parquet").is_file(), (name, out[-6000:])
    m = tables.read(base / "measurements.parquet").set_index(["variant", "size"])
    assert (m.loc["02_coalescing", "status"] == "ok").all()
    assert (m.loc["90_wrong", "failure"] == "wrong").all()
    assert (m.loc["95_hang", "failure"] == "hang").all()
    prof = tables.read(base / "profile.parquet")
    assert set(prof.loc[prof["variant"] == "95_hang", "status"]) == {"not_run"}
    assert (prof.loc[prof["variant"] == "02_coalescing", "status"] == "ok").all()
    san = tables.read(base / "sanitizer.parquet")
    assert set(san.loc[san["variant"] == "95_hang", "verdict"]) == {"not_run"}
    page = (base / "worklog.md").read_text()
    top = page[: page.index("## Provenance")]
    assert "## Failures" in top and "**90_wrong**" in top and "**95_hang**" in top
    assert "02_coalescing" in page
    assert (base / "worklog.html").is_file()
    assert not (base / "bench.ok").exists()
    tail = proc.stderr[proc.stderr.rindex("kernelbook: the run's gates failed:") :]
    assert "mixed: 4 unexpected failure(s)" in tail, tail
    assert "mixed/90_wrong 256x256x256 [bench] wrong:" in tail
    assert "mixed/95_hang 256x256x256 [bench] hang:" in tail
    assert "mixed/95_hang 1000x1000x1000 [bench] hang: not run" in tail
    failed_rules = {
        line.split()[-1].rstrip(":")
        for line in out.splitlines()
        if line.startswith("Error in rule")
    }
    assert failed_rules <= {"bench_gate", "sanitize_gate"}, out[-6000:]


@pytest.mark.slow  # a whole Snakemake run: the release tier (-m 'gpu and slow')
def test_a_faults_study_costs_seconds_and_names_every_fault(tmp_path):
    """Issue 24: a correct kernel beside wrong, out-of-bounds, hanging and non-compiling
    ones, from an empty results/ to the gates' summary and the page, under the default
    limits: within 3 minutes, every fault named at the end. The tools do not wait out
    their full limits on a kernel the bench already found failing."""
    import time

    import yaml

    root = _copy_with_analysis(tmp_path / "repo")
    (root / "kernels" / "controls" / "96_syntax.cu").write_text(
        'extern "C" __global__ void control_syntax(int n) { this is not C }\n'
    )
    faults = dict(MIXED, title="One correct kernel and four faulty ones")
    faults["variants"] = [
        *MIXED["variants"],
        {
            "id": "92_oob",
            "source": "kernels/controls/92_oob.cu",
            "entry": "control_oob",
            "grid": ["cdiv(N, 32)", "cdiv(M, 32)"],
            "block": [1024],
        },
        {
            "id": "96_syntax",
            "source": "kernels/controls/96_syntax.cu",
            "entry": "control_syntax",
            "grid": [1],
            "block": [32],
        },
    ]
    (root / "config" / "studies" / "faults.yaml").write_text(yaml.safe_dump(faults))
    cfgfile = root / "config" / "config.yaml"
    conf = yaml.safe_load(cfgfile.read_text())
    conf.update(studies=["faults"])
    cfgfile.write_text(yaml.safe_dump(conf))
    start = time.monotonic()
    proc = _snakemake_in(root, "--cores", "4", "all")
    took = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-6000:]
    base = root / "results" / INFO.slug / "faults"
    assert (base / "worklog.md").is_file() and (base / "worklog.html").is_file(), out[-6000:]
    tail = proc.stderr[proc.stderr.rindex("kernelbook: the run's gates failed:") :]
    for named in (
        "faults/90_wrong 256x256x256 [bench] wrong:",
        "faults/92_oob",
        "faults/95_hang 256x256x256 [bench] hang:",
        "faults/96_syntax 256x256x256 [bench] compile: nvcc failed on kernels/controls/96_syn",
    ):
        assert named in tail, tail
    san = tables.read(base / "sanitizer.parquet")
    oob = san[san["variant"] == "92_oob"]
    assert len(oob) and (oob["verdict"] != "hang").all(), oob  # explained or stopped, not waited on
    print(f"faults study: {took:.0f} s from an empty results/ to the gates' summary")
    assert took <= 180, took


def _group_alive(needle: str) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (p / "stat").read_text().split(")")[-1].split()[0]
            except OSError:
                continue
            if needle in cmd and state != "Z":
                pids.append(int(p.name))
    return pids


@pytest.mark.parametrize("stage", ["profile", "sanitize"])
def test_a_hang_under_a_tool_is_killed_and_recorded(tmp_path, stage):
    """Without the bench's word (no --bench-table), ncu and compute-sanitizer meet the hang:
    past their limit the whole process group, the launch helper included, is killed, and
    the row names the tool, variant and size."""
    import time

    build_dir = _compile(tmp_path, "controls", "95_hang", settings=CONTROLS)
    out = tmp_path / f"{stage}.parquet"
    limit = 10  # past the helper's start-up under the tool (imports, CUDA): the kernel runs
    settings = {**CONTROLS, "timeouts": {"ncu_s": limit, "sanitizer_s": limit}}
    args = [stage, "controls", "95_hang", "--build-dir", str(build_dir), "--out", str(out)]
    if stage == "profile":
        args += ["--reports", str(tmp_path / "reports")]
    start = time.monotonic()
    kb(*args, settings=settings, timeout=600)
    took = time.monotonic() - start
    df = tables.read(out)
    if stage == "profile":
        assert (df["status"] == "failed").all() and (df["failure"] == "hang").all(), df
        assert f"ncu still running after {limit} s (timeouts.ncu_s)" in df["reason"].iloc[0]
        assert df["reason"].iloc[0].startswith("controls/95_hang at 1000x1000x1000: ncu")
        assert took < limit * len(df) + 120, took
    else:
        assert (df["verdict"] == "hang").all(), df
        first = df["first_finding"].iloc[0]
        assert f"compute-sanitizer still running after {limit} s (timeouts.sanitizer_s)" in first
        assert "controls/95_hang at 100x100x100: memcheck" in first
        assert took < limit * len(df) + 120, took
    deadline = time.monotonic() + 15  # a process leaving the driver may take a moment
    while _group_alive("launch controls 95_hang") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _group_alive("launch controls 95_hang"), "a launch helper survived its tool"


def test_launch_helper_gives_up_on_a_hang():
    import time

    start = time.monotonic()
    proc = kb(
        "launch",
        "controls",
        "95_hang",
        "--size",
        "256",
        settings={**CONTROLS, "timeouts": {"launch_s": 5}},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 124, proc.stderr
    assert time.monotonic() - start < 60
    said = "controls/95_hang at 256x256x256: still running after 5 s (timeouts.launch_s)"
    assert said in proc.stderr


def _ncu_time_ns(variant, entry, size):
    proc = subprocess.run(
        [
            "ncu",
            "--clock-control",
            "none",
            "--metrics",
            "gpu__time_duration.sum",
            "--print-units",
            "base",
            "--csv",
            "-k",
            f"regex:^{entry}$",
            "--launch-skip",
            "2",
            "--launch-count",
            "1",
            sys.executable,
            "-m",
            "kernelbook",
            "launch",
            "sgemm",
            variant,
            "--size",
            size,
            "--repeat",
            "4",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith('"')]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    vals = [r for r in rows if r["Metric Name"] == "gpu__time_duration.sum"]
    assert len(vals) == 1, proc.stdout
    assert vals[0]["Metric Unit"] in ("nsecond", "ns"), vals[0]
    return float(vals[0]["Metric Value"].replace(",", ""))


def test_event_timing_agrees_with_ncu(tmp_path):
    df = bench(tmp_path, "02_coalescing", "2048", settings={})
    median_ms = float(df["median_ms"].iloc[0])
    assert median_ms > 1.0, "the comparison is meant for a kernel over 1 ms"
    ncu_ms = _ncu_time_ns("02_coalescing", "sgemm_coalescing", "2048") / 1e6
    assert abs(median_ms / ncu_ms - 1) < 0.03, (median_ms, ncu_ms)


def test_back_to_back_measurements_agree(tmp_path):
    a = bench(tmp_path, "02_coalescing", "2048", settings={})
    b = bench(tmp_path, "02_coalescing", "2048", settings={})
    ma, mb = float(a["median_ms"].iloc[0]), float(b["median_ms"].iloc[0])
    assert abs(ma / mb - 1) < 0.02, (ma, mb)
    assert (a["rse_median"] < 0.01).all()


def test_a_size_is_timed_on_the_inputs_it_was_checked_on(tmp_path, monkeypatch):
    """Each size's checked case is kept for its timing (the log says "inputs kept"); with
    no room to keep it (KERNELBOOK_KEEP_BYTES=0) the inputs are made again, and the rows
    agree to the last digit where they depend only on the inputs: the same seeded data."""
    sizes = ["256", "M=1000,N=200,K=300"]
    args = ["bench", "sgemm", "02_coalescing", *(a for s in sizes for a in ("--size", s))]

    def run(name):
        out = tmp_path / f"{name}.parquet"
        proc = kb(*args, "--out", str(out), settings=FAST)
        return tables.read(out), proc.stderr

    kept, log = run("kept")
    assert log.count("(inputs kept ") == len(sizes), log
    monkeypatch.setenv("KERNELBOOK_KEEP_BYTES", "0")
    again, log = run("again")
    assert "inputs kept" not in log and log.count("(inputs ") == len(sizes), log
    for col in ("rel_err", "max_err", "baseline_rel_err"):
        assert list(kept[col]) == list(again[col]), col


def test_a_kept_case_is_timed_with_its_own_launch_set_up(tmp_path):
    """The dynamic shared memory allowance is the kernel's, not the launch's: a size checked
    after another leaves its own. attention's 02_fused_row holds a row of S scores in
    shared memory, so S = 1024 timed after S = 512 was checked needs its allowance set
    again (the book run at 18d7765: CUDA_ERROR_INVALID_VALUE)."""
    sizes = ["B=1,H=2,S=1024,D=128,causal=0", "B=1,H=2,S=512,D=128,causal=0"]
    out = tmp_path / "fused.parquet"
    args = ["bench", "attention", "02_fused_row", *(a for s in sizes for a in ("--size", s))]
    proc = kb(*args, "--out", str(out), settings=FAST)
    assert proc.stderr.count("(inputs kept ") == len(sizes), proc.stderr
    df = tables.read(out)
    assert list(df["status"]) == ["ok", "ok"], df[["size", "status", "failure"]]


def test_graph_timing_for_tiny_kernels(tmp_path):
    settings = {"timing": {"method": "graph", "cache": "warm", "min_time_s": 0.02, "max_time_s": 2}}
    df = bench(tmp_path, "02_coalescing", "128", "256", settings=settings)
    assert (df["graph_launches"] == 20).all()  # timing_method is now the instrument
    assert (df["flush_bytes"] == 0).all()
    assert (df["median_ms"] > 0).all() and (df["median_ms"] < 1).all()
    events = bench(tmp_path, "02_coalescing", "256", settings={"timing": {"cache": "warm"}})
    # a graph removes launch gaps, so it can only be faster, but not by orders of magnitude
    ratio = float(df["median_ms"].iloc[1]) / float(events["median_ms"].iloc[0])
    assert 0.3 < ratio < 1.1, ratio


def test_device_table(tmp_path):
    out = tmp_path / "device.parquet"
    kb("device", "--out", str(out))
    df = tables.read(out).set_index("quantity")["value"]
    assert df["sm_count"] >= 1
    assert df["l2_bytes"] > 1e6
    assert df["copy_gbps"] > 500
    # reading alone, the ceiling a decode GEMV streams its weights against: above the copy's
    # (which reads and writes), below the memory's theoretical peak
    assert df["copy_gbps"] * 0.9 < df["dram_read_gbps"] < df["dram_peak_gbps"]
    assert 0 < df["cublas_fp32_tflops"] < df["fp32_peak_tflops"] * 1.05
    assert df["cublas_bf16_tflops"] > df["cublas_fp32_tflops"]


def test_several_variants_in_one_bench_each_get_their_own_verdict(tmp_path):
    """One job, four controls: a wrong one is recorded and the next runs in the same worker;
    a crash loses that worker's device, so a fresh worker (its own CUDA context) runs the
    rest, and every variant gets its verdict in one table."""
    out = tmp_path / "m.parquet"
    run = ["90_wrong", "02_coalescing", "94_crash", "91_nan"]
    proc = kb(
        "bench", "controls", *run, "--size", "256", "--record-failure", "--out", str(out),
        settings={**CONTROLS, "timing": CHECK_TIMING},
    )  # fmt: skip
    df = tables.read(out).set_index("variant")
    assert list(df.index) == run, df[["size", "status", "failure"]]
    assert df.loc["90_wrong", "failure"] == "wrong" and df.loc["02_coalescing", "status"] == "ok"
    assert df.loc["94_crash", "failure"] == "crash"
    assert df.loc["91_nan", "failure"] == "nonfinite"  # run after the crash, on a live device
    assert "controls/94_crash lost the device (crash): a fresh process runs 91_nan" in proc.stderr
    assert any(line.startswith("variant") for line in proc.stdout.splitlines()), proc.stdout


def test_a_process_runs_each_cubins_own_kernel_where_entry_names_repeat(tmp_path):
    """kernelbook.launch's loading path (CuPy's RawModule on a cubin's path, then the entry by
    name) twice in one process: two cubins of the same file name in two folders whose kernels
    share a name, the first one's module dropped before the second is loaded, as a bench of
    several candidates does. Each launch must run its own cubin's kernel (the attention P.V
    probe once ran the previous case's)."""
    import gc

    import cupy as cp

    got = []
    for i, value in enumerate((1.5, 2.5)):
        (tmp_path / str(i)).mkdir()
        src, cubin = tmp_path / str(i) / "kernel.cu", tmp_path / str(i) / "kernel.cubin"
        body = f"o[threadIdx.x] = {value}f;"
        src.write_text(f'extern "C" __global__ void entry(float* o) {{ {body} }}')
        subprocess.run(
            ["nvcc", "-cubin", "-arch=native", "-o", str(cubin), str(src)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        fn = cp.RawModule(path=str(cubin)).get_function("entry")
        out = cp.zeros(32, dtype=cp.float32)
        fn((1,), (32,), (out,))
        got.append(float(out.get()[0]))
        del fn
        gc.collect()
    assert got == [1.5, 2.5]


def test_48_kib_of_dynamic_shared_memory_beside_a_static_array_launches_once_opted_in(tmp_path):
    """A kernel's default dynamic allowance is 48 KiB less its static shared memory: 48 KiB
    dynamic beside 8 KiB static fails with a bare invalid-argument error unless opted in,
    which kernelbook.launch does for every launch with dynamic shared memory (w4a16's
    10_ring_persistent at STAGES = 3 failed so while only launches past 48 KiB were)."""
    import cupy as cp

    from kernelbook.launch.kernel import allow_dynamic_smem

    src, cubin = tmp_path / "kernel.cu", tmp_path / "kernel.cubin"
    src.write_text(
        'extern "C" __global__ void entry(float* o) {\n'
        "  __shared__ float fixed[2048];\n"
        "  extern __shared__ float ring[];\n"
        "  fixed[threadIdx.x] = 1.0f; ring[12287 - threadIdx.x] = 2.0f;\n"
        "  __syncthreads();\n"
        "  o[threadIdx.x] = fixed[threadIdx.x] + ring[12287 - threadIdx.x];\n"
        "}\n"
    )
    subprocess.run(
        ["nvcc", "-cubin", "-arch=native", "-o", str(cubin), str(src)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    dynamic = 48 * 1024
    out = cp.zeros(32, dtype=cp.float32)
    fn = cp.RawModule(path=str(cubin)).get_function("entry")
    with pytest.raises(cp.cuda.driver.CUDADriverError, match="INVALID_VALUE"):
        fn((1,), (32,), (out,), shared_mem=dynamic)
    allow_dynamic_smem(fn, dynamic)
    fn((1,), (32,), (out,), shared_mem=dynamic)
    assert out.get().tolist() == [3.0] * 32


@pytest.mark.gpu_exclusive
def test_a_test_that_holds_the_gpu_runs_its_jobs_under_its_lock(tmp_path):
    """The GPU tier on xdist workers: a gpu_exclusive test holds the GPU's lock (no other
    process can take it, even shared), and its own kernelbook jobs run under it at once."""
    from kernelbook import gpu

    assert os.environ[gpu.SLOT_HELD_ENV] == "1"
    held = os.environ["CUDA_VISIBLE_DEVICES"]
    probe = (
        f"from kernelbook import gpu; print(gpu.take_lock(gpu.lock_dir(), [{held!r}], shared=True))"
    )
    env = {k: v for k, v in os.environ.items() if k != gpu.SLOT_HELD_ENV}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() == "None", out.stdout + out.stderr
    df = bench(tmp_path, "02_coalescing", "128")
    assert (df["status"] == "ok").all() and (df["job_wait_s"] < 1).all()
    assert (df["gpu_uuid"] == held).all()


def test_cli_prints_a_table():
    proc = kb("bench", "sgemm", "02_coalescing", "--size", "512", settings=FAST)
    assert "% base" in proc.stdout and "512x512x512" in proc.stdout


@pytest.mark.skipif(INFO is None or INFO.count < 2, reason="needs two GPUs")
def test_concurrent_jobs_land_on_distinct_gpus(tmp_path):
    results = tmp_path / "results"
    slug = INFO.slug
    targets = [
        str(results / slug / "sgemm" / "bench" / f"{v}.parquet")
        for v in ("01_naive", "02_coalescing")
    ]
    # nested values through a config file: --config parses them as strings
    overlay = tmp_path / "fast.yaml"
    overlay.write_text(json.dumps({"results": str(results), **FAST}))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            *targets,  # first: --resources and --configfile take every value after them
            "--cores",
            "4",
            "--resources",
            "gpu=2",
            "--configfile",
            str(overlay),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "KERNELBOOK_LOCK_DIR": str(tmp_path / "locks")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    uuids = {tables.read(t)["gpu_uuid"].iloc[0] for t in targets}
    assert len(uuids) == 2, uuids


@pytest.mark.slow  # a whole Snakemake run: the release tier (-m 'gpu and slow')
def test_a_tune_space_is_benched_in_one_job_then_its_winners_picked(tmp_path):
    """The pipeline's tuning through real Snakemake: every candidate of a tuned variant
    compiled by its own job, then benched in one (bench_candidates: one process, one GPU
    lock, one table and one samples table), then a winner picked at each tune size."""
    results = tmp_path / "results"
    slug = INFO.slug
    study = "softmax"
    variant = "06_online_tuned"
    tuned = results / slug / study / "tuned" / f"{variant}.parquet"
    overlay = tmp_path / "fast.yaml"
    overlay.write_text(json.dumps({"results": str(results), "studies": [study], **FAST}))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", str(tuned), "--cores", "4", "--resources", "gpu=1",
         "--configfile", str(overlay)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "KERNELBOOK_LOCK_DIR": str(tmp_path / "locks")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    from kernelbook import config

    p = config.load_project_file(ROOT / "config" / "config.yaml", overrides={"studies": [study]})
    v = p.study(study).variant(variant)
    got = tables.read(results / slug / study / "candidates" / f"{variant}.parquet")
    assert sorted(set(got["variant"])) == sorted(v.candidates)
    assert (got["variant_kind"] == "candidate").all() and (got["tuned_from"] == variant).all()
    assert len(got) == len(v.candidates) * len(v.tune_sizes)
    ok = got[got["status"] == "ok"]
    assert len(ok) and ok["correct"].all()
    # one job: every candidate's rows carry its start-up and its wait for the GPU
    assert ok["job_startup_s"].nunique() == 1 and ok["job_wait_s"].nunique() == 1
    samples = tables.read(results / slug / study / "samples" / "candidates" / f"{variant}.parquet")
    assert set(samples["variant"]) == set(ok["variant"])
    bench = results / "benchmarks" / "bench_candidates" / slug / study / f"{variant}.tsv"
    assert bench.is_file()
    assert not (results / slug / study / "bench").exists()  # no job a candidate
    won = tables.read(tuned)
    picks = won[won["variant_kind"] == "tuned"]
    assert len(picks) == len(v.tune_sizes) and set(picks["tuned_from"]) <= set(v.candidates)


def _naive_ffma(r) -> bool:
    """The FFMA count of a naive SGEMM kernel (01_naive, 02_coalescing) as ncu reports it:
    one a multiply-add of the K loop, plus one an output for the epilogue (alpha * acc +
    beta * C: an FMUL and an FFMA), M·N·(K+1); within 0.1 % (at K = 64 the epilogue alone
    is 1.6 %)."""
    want = r["M"] * r["N"] * (r["K"] + 1)
    return abs(r["value"] / want - 1) < 1e-3


def _compile(tmp_path, study, variant, settings=None):
    cubin = tmp_path / "build" / variant / "kernel.cubin"
    kb("compile", study, variant, "--cubin", str(cubin), settings=settings)
    return tmp_path / "build"


def _no_failures(folder: Path, study: str, variants) -> Path:
    """Bench tables that record no failure (a real, empty measurements table a variant): a
    profile of several variants reads one for each."""
    import pandas as pd

    from kernelbook import config

    configfile = ROOT / "config" / "config.yaml"
    project = config.load_project_file(configfile, overrides={"studies": [study]})
    sizes = project.study(study).size_names
    names = tables.schema("measurements", sizes).names
    for v in variants:
        tables.write(pd.DataFrame(columns=names), folder / f"{v}.parquet", "measurements", sizes)
    return folder


def _and_baseline(df, name: str, sizes):
    """A study profile's rows: (the variants', the baseline's), the baseline's checked to be
    there at every size, profiled (status ok), with the kernels ncu found inside its range."""
    vid = f"baseline:{name}"
    base = df[df["variant"] == vid]
    assert set(base["size"]) == set(sizes) and (base["status"] == "ok").all(), base
    t = base[base["metric"] == "gpu__time_duration.sum"]
    assert len(t) == len(sizes) and (t["value"] > 0).all() and t["kernel"].str.len().all(), t
    return df[df["variant"] != vid], base


def test_a_study_profile_runs_its_variants_in_one_ncu_process(tmp_path):
    """Several variants, one ncu run (the pipeline's profile job): each launch is its own
    report action, in the plan's order, and each variant's rows say so."""
    from kernelbook.report.quality import profile_time

    run = ["01_naive", "02_coalescing"]
    for v in run:
        build_dir = _compile(tmp_path, "sgemm", v)
    bench = _no_failures(tmp_path / "bench", "sgemm", run)
    out, reports = tmp_path / "profile.parquet", tmp_path / "reports"
    kb("profile", "sgemm", *run, "--build-dir", str(build_dir), "--bench-dir", str(bench),
       "--size", "256", "--size", "512", "--reports", str(reports), "--out", str(out))  # fmt: skip
    df = tables.read(out)
    ours, base = _and_baseline(df, "cublas", ("256x256x256", "512x512x512"))
    ffma = ours[ours["metric"] == "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"]
    assert sorted(zip(ffma["variant"], ffma["size"], strict=True)) == [
        (v, z) for v in run for z in ("256x256x256", "512x512x512")
    ]
    for _, r in ffma.iterrows():
        assert _naive_ffma(r), r
    assert set(ours["report"].dropna()) == {"study.ncu-rep"}
    assert (reports / "study.ncu-rep").is_file()
    # cuBLAS's FP32 GEMM: at least the problem's M N K multiply-adds (a tile may pad)
    bffma = base[base["metric"] == "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"]
    for _, r in bffma.iterrows():
        assert r["value"] >= r["M"] * r["N"] * r["K"], r
    spent = profile_time(df)  # the variants' run, and the baseline's by NVTX range
    assert spent["jobs"] == 1 and spent["processes"] == 2 and spent["sizes"] == 6


def test_the_quick_profile_of_several_variants_compiles_them_and_runs_ncu_once(tmp_path):
    """`kernelbook profile STUDY V1 V2 --size S` with no folders (the quick loop): both
    compiled here first, then one ncu run at every size, one report, each variant's rows."""
    run = ["01_naive", "02_coalescing"]
    out, reports = tmp_path / "profile.parquet", tmp_path / "reports"
    kb("profile", "sgemm", *run, "--size", "256", "--size", "320", "--reports", str(reports),
       "--out", str(out))  # fmt: skip
    df = tables.read(out)
    ours, _ = _and_baseline(df, "cublas", ("256x256x256", "320x320x320"))
    ffma = ours[ours["metric"] == "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"]
    assert sorted(zip(ffma["variant"], ffma["size"], strict=True)) == [
        (v, z) for v in run for z in ("256x256x256", "320x320x320")
    ]
    for _, r in ffma.iterrows():
        assert _naive_ffma(r), r
    assert set(ours["report"].dropna()) == {"study.ncu-rep"}
    assert (reports / "study.ncu-rep").is_file()


def test_a_quick_profile_runs_the_baseline_a_target_is_held_against_too(tmp_path):
    """w4a16's targets are on cuBLAS BF16, a baseline timed beside its primary (dequantize,
    then matmul): a quick profile runs both, each with its own rows at the size, and cuBLAS
    BF16 reads the weights in 16 bits where the 4-bit step reads them in 4 (more than 3x
    its DRAM bytes)."""
    run = ["13_tiled_w__WARPS4_UNR1_MIN_BLOCKS8"]
    out, reports = tmp_path / "profile.parquet", tmp_path / "reports"
    kb("profile", "w4a16", *run, "--size", "1x4096x4096", "--reports", str(reports),
       "--out", str(out))  # fmt: skip
    df = tables.read(out)
    rest, _ = _and_baseline(df, "dequant_matmul", ("1x4096x4096",))
    ours, cublas = _and_baseline(rest, "cublas_bf16", ("1x4096x4096",))
    assert set(ours["variant"]) == set(run)

    def dram(rows):
        return rows[rows["metric"] == "dram__bytes_read.sum"]["value"].iloc[0]

    assert dram(cublas) > 3 * dram(ours) > 3 * 4096 * 4096 / 2, (dram(cublas), dram(ours))


def test_a_study_profile_runs_its_several_kernel_variants_in_one_ncu_process(tmp_path):
    """Variants of several kernels (split-KV and its combine), found by NVTX range, share one
    ncu run at all their sizes (ranged.ncu-rep): each launch's kernels are told apart by the
    launch's own range and summed as one row set, as a process a size would have them."""
    from kernelbook.report.quality import profile_time

    run = ["02_split_kv", "03_page_per_warp"]
    for v in run:
        build_dir = _compile(tmp_path, "paged_decode", v)
    bench = _no_failures(tmp_path / "bench", "paged_decode", run)
    out, reports = tmp_path / "profile.parquet", tmp_path / "reports"
    kb("profile", "paged_decode", *run, "--build-dir", str(build_dir), "--bench-dir",
       str(bench), "--size", "3x100", "--size", "8x1000", "--reports", str(reports), "--out",
       str(out))  # fmt: skip
    from kernelbook import config

    df = tables.read(out)
    project = config.load_project_file(ROOT / "config" / "config.yaml")
    name = project.study("paged_decode").baseline
    ours, base = _and_baseline(df, name, ("3x100", "8x1000"))
    t = ours[ours["metric"] == "gpu__time_duration.sum"]
    assert sorted(zip(t["variant"], t["size"], strict=True)) == [
        (v, z) for v in run for z in ("3x100", "8x1000")
    ]
    # the baseline shares the run: its launches have NVTX ranges of their own too
    assert set(df["report"].dropna()) == {"ranged.ncu-rep"}, set(df["report"].dropna())
    for _, r in t.iterrows():  # the split kernel and the combine, in one row set
        assert r["value"] > 0 and "combine" in r["kernel"] and ";" in r["kernel"], r
    spent = profile_time(df)
    assert spent["processes"] == 1 and spent["sizes"] == 6


def test_a_crash_in_a_study_profile_costs_only_its_variant(tmp_path):
    """The study's one ncu run fails on a kernel that faults: every variant is then profiled
    on its own, so the good one has its metrics and the crash one failed row."""
    run = ["02_coalescing", "94_crash"]
    for v in run:
        build_dir = _compile(tmp_path, "controls", v, settings=CONTROLS)
    bench = _no_failures(tmp_path / "bench", "controls", run)
    out = tmp_path / "profile.parquet"
    proc = kb("profile", "controls", *run, "--build-dir", str(build_dir), "--bench-dir",
              str(bench), "--size", "256", "--reports", str(tmp_path / "reports"), "--out",
              str(out), settings=CONTROLS)  # fmt: skip
    assert "one ncu run for the study failed, each variant on its own now" in proc.stderr
    df = tables.read(out)
    good = df[(df["variant"] == "02_coalescing") & (df["status"] == "ok")]
    assert len(good) and "study.ncu-rep" not in set(good["report"])  # its own run
    bad = df[df["variant"] == "94_crash"]
    assert list(bad["status"]) == ["failed"] and list(bad["failure"]) == ["tool"], bad


def test_a_study_sanitize_runs_each_tool_once_for_its_clean_variants(tmp_path):
    """The study's sanitize job: each tool in one process for every variant (a plan run at
    each one's sanitize size); finding nothing there, every variant is clean for that tool,
    and none is run again on its own."""
    run = ["01_naive", "02_coalescing"]
    for v in run:
        build_dir = _compile(tmp_path, "sgemm", v)
    bench = _no_failures(tmp_path / "bench", "sgemm", run)
    out = tmp_path / "sanitizer.parquet"
    proc = kb("sanitize", "sgemm", *run, "--build-dir", str(build_dir), "--bench-dir",
              str(bench), "--out", str(out))  # fmt: skip
    assert "each variant on its own" not in proc.stderr, proc.stderr
    df = tables.read(out)
    assert sorted(zip(df["variant"], df["tool"], strict=True)) == sorted(
        (v, t) for v in run for t in ("memcheck", "racecheck", "initcheck", "synccheck")
    )
    assert (df["verdict"] == "clean").all() and (df["exit_code"] == 0).all(), df
    gate = kb("sanitize-gate", "sgemm", str(out), "--out", str(tmp_path / "ok"))
    assert gate.returncode == 0


# 01 in the quick tier; 02 (the same FFMAs, other loads) in the slow one
@pytest.mark.parametrize(
    "variant", ["01_naive", pytest.param("02_coalescing", marks=pytest.mark.slow)]
)
def test_profile_counts_the_gemm_ffmas(tmp_path, variant):
    build_dir = _compile(tmp_path, "sgemm", variant)
    out = tmp_path / "profile.parquet"
    kb(
        "profile",
        "sgemm",
        variant,
        "--build-dir",
        str(build_dir),
        "--reports",
        str(tmp_path / "reports"),
        "--out",
        str(out),
    )
    df = tables.read(out)
    assert list((tmp_path / "reports").glob("*.ncu-rep")), "the .ncu-rep is kept"
    row = df[df["metric"] == "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"].iloc[0]
    assert _naive_ffma(row), row
    mnk = row["M"] * row["N"] * row["K"]
    assert (df["clock_control"] == "none").all()
    # the roofline derivation counts 2 FLOP per FFMA
    roof = tmp_path / "roofline.parquet"
    kb("roofline", "sgemm", "--profile", str(out), "--out", str(roof))
    r = tables.read(roof).iloc[0]
    assert abs(r["flop"] / (2 * mnk) - 1) < 0.01
    assert r["dram_bytes"] > 0 and r["l2_bytes"] >= r["dram_bytes"] * 0.5
    assert r["top_stall"]


def test_quick_profile_at_any_size_compiles_the_variant_itself(tmp_path):
    """The quick loop: `kernelbook profile --size` with no build folder compiles the variant
    and profiles it at the sizes given, not the study's profile sizes, beside the study's
    baseline at each (as a quick profile of several variants does)."""
    out = tmp_path / "profile.parquet"
    kb("profile", "sgemm", "01_naive", "--size", "256x128x64", "--size", "128x128x128",
       "--reports", str(tmp_path / "reports"), "--out", str(out))  # fmt: skip
    df, _ = _and_baseline(tables.read(out), "cublas", ("256x128x64", "128x128x128"))
    assert set(df["variant"]) == {"01_naive"}
    ffma = df[df["metric"] == "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"]
    assert sorted(ffma["size"]) == ["128x128x128", "256x128x64"]
    for _, r in ffma.iterrows():
        assert _naive_ffma(r), r


CONTROLS = {"studies": ["controls"]}


@pytest.mark.parametrize(
    ("variant", "tool", "verdict"),
    [
        ("92_oob", "memcheck", "expected"),
        ("93_race", "racecheck", "expected"),
        ("02_coalescing", None, "clean"),
    ],
)
def test_sanitizer_flags_the_controls_and_passes_a_good_kernel(tmp_path, variant, tool, verdict):
    build_dir = _compile(tmp_path, "controls", variant, settings=CONTROLS)
    out = tmp_path / "sanitizer.parquet"
    kb(
        "sanitize",
        "controls",
        variant,
        "--build-dir",
        str(build_dir),
        "--out",
        str(out),
        settings=CONTROLS,
    )
    df = tables.read(out).set_index("tool")
    assert set(df.index) == {"memcheck", "racecheck", "initcheck", "synccheck"}
    if tool is None:
        assert (df["verdict"] == "clean").all(), df
        gate = kb("sanitize-gate", "controls", str(out), "--out", str(tmp_path / "ok"))
        assert gate.returncode == 0
    else:
        assert df.loc[tool, "verdict"] == verdict
        assert df.loc[tool, "errors"] > 0
        assert ".cu:" in df.loc[tool, "first_finding"]  # -lineinfo names the source line
        # a negative control's findings are what it declares (expect:): the gate passes;
        # the same findings of a variant without expect fail it (tests/test_failgate.py)
        gate = kb("sanitize-gate", "controls", str(out), "--out", str(tmp_path / "ok"))
        assert gate.returncode == 0, gate.stderr


def _sgemm_jobs():
    from kernelbook import config

    study = config.load_project_file(ROOT / "config" / "config.yaml").study("sgemm")
    plain = [v.id for v in study.variants if not v.is_tuned]
    for v in study.variants:
        if v.is_tuned:
            plain += candidate_sample("sgemm", v.id)
    return plain


SGEMM_JOBS = _sgemm_jobs()


@pytest.mark.parametrize("variant", SGEMM_JOBS)
def test_every_sgemm_variant_correct_at_a_small_and_an_odd_shape(bench_batch, variant):
    df = bench_batch(FAST, "sgemm", SGEMM_JOBS, ["128", "1000x1004x500"], variant)
    assert list(df["status"]) == ["ok", "ok"], df[["size", "status", "reason"]]
    assert df["correct"].all() and (df["rel_err"] < df["tolerance"]).all()
