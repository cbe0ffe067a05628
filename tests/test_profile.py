"""The profile and sanitize stages' CPU side, on real output captured on the H200:

- tests/fixtures/sgemm_02_256.ncu-rep: Nsight Compute's report of 02_coalescing at 256^3;
- tests/fixtures/san-*.txt: compute-sanitizer's output for clean and planted-bug controls at
  100^3 (92_oob writes past C, 93_race shares tiles without barriers);

plus the roofline arithmetic on values worked out by hand.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from kernelbook import gate
from kernelbook.profile import ncu as profile
from kernelbook.profile import ncu_read, roofline, sanitize

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPORT = FIXTURES / "sgemm_02_256.ncu-rep"


# ------------------------------------------------------------------------------------------
# The report reader


@pytest.fixture(scope="module")
def report():
    kernel, rows = profile.read_report(REPORT)
    return kernel, {name: (value, unit) for name, value, unit in rows}


def test_report_names_the_profiled_kernel(report):
    kernel, metrics = report
    assert kernel == "sgemm_coalescing"
    assert len(metrics) > 100  # the default sections and metrics, not a handful


def test_report_counts_the_gemm_ffmas(report):
    _, m = report
    ffma, unit = m["sm__sass_thread_inst_executed_op_ffma_pred_on.sum"]
    mnk = 256**3
    # M*N*K in the k loop plus one per output for alpha*acc + beta*C
    assert ffma == mnk + 256 * 256, ffma
    assert unit == "inst"
    # no other FP32 math in this kernel: the roofline's FLOPs are 2 per FFMA
    assert m["sm__sass_thread_inst_executed_op_fadd_pred_on.sum"][0] == 0


def test_report_values_carry_units(report):
    _, m = report
    assert m["gpu__time_duration.sum"][1] == "ns" and m["gpu__time_duration.sum"][0] > 1000
    assert m["dram__bytes_read.sum"][1] == "byte"
    assert m["launch__registers_per_thread"] == (32.0, "register/thread")
    # every traffic level is present for the roofline: bytes grow from DRAM to L1
    dram = m["dram__bytes_read.sum"][0] + m["dram__bytes_write.sum"][0]
    assert 0 < dram <= m["lts__t_bytes.sum"][0] <= m["l1tex__t_bytes.sum"][0]
    stalls = [
        n for n in m if n.startswith(profile.STALL_PREFIX) and n.endswith(profile.STALL_SUFFIX)
    ]
    assert len(stalls) >= 10


def test_report_each_lists_the_kernels_in_order(report):
    each = profile.read_report_each(REPORT)
    assert [name for name, _ in each] == ["sgemm_coalescing"]
    assert {n: (v, u) for n, v, u in each[0][1]} == report[1]


def test_one_ncu_run_profiles_a_launch_of_each_size():
    """Several sizes, one process: the launch helper gets a --size each, in order, and ncu
    profiles as many launches of the entry; a torch variant's range takes no count."""
    from types import SimpleNamespace

    from kernelbook.launch.process import launch_command

    project = SimpleNamespace(settings={"seed": 1})
    study, variant = SimpleNamespace(name="softmax"), SimpleNamespace(id="04_online")
    cmd = launch_command(project, study, variant, ["4096x16384", "4096x65536"], "k.cubin")
    at = cmd.index("launch")
    assert cmd[at : at + 7] == ["launch", "softmax", "04_online", "--size", "4096x16384",
                                "--size", "4096x65536"]  # fmt: skip
    assert launch_command(project, study, variant, "512", "k.cubin").count("--size") == 1
    ncu = profile.ncu_command("softmax_online", Path("r"), cmd, {}, launches=2, exe="ncu")
    assert ncu[ncu.index("--launch-count") + 1] == "2"
    assert ncu[ncu.index("-k") + 1] == "regex:^softmax_online$"
    assert "--launch-count" not in profile.ncu_command(None, Path("r"), cmd, {}, exe="ncu")


def test_report_reader_rejects_a_file_that_is_no_report(tmp_path):
    bad = tmp_path / "bad.ncu-rep"
    bad.write_bytes(b"not a report")
    with pytest.raises(Exception) as e:
        profile.read_report(bad)
    assert not isinstance(e.value, AssertionError)


def test_the_report_becomes_a_roofline_row(report):
    _, m = report
    rows = [
        {
            "study": "sgemm",
            "variant": "02_coalescing",
            "M": 256,
            "N": 256,
            "K": 256,
            "size": "256x256x256",
            "metric": name,
            "value": value,
            "gpu_name": "NVIDIA H200",
            "gpu_uuid": "GPU-x",
        }
        for name, (value, _) in m.items()
    ]
    roof = roofline.roofline(pd.DataFrame(rows), None, None, ("M", "N", "K"), lambda s: 2 * 256**3)
    r = roof.iloc[0]
    assert abs(r["flop"] / r["flop_expected"] - 1) < 0.01
    assert r["ai_dram"] > r["ai_l2"] > r["ai_l1"] > 0
    assert r["top_stall"] and r["top_stall"] != "selected"
    assert r["registers_per_thread"] == 32


# ------------------------------------------------------------------------------------------
# Roofline arithmetic on known values


def _profile_rows(metrics: dict[str, float], variant="v", size="1024x1024x1024"):
    return pd.DataFrame(
        [
            {
                "study": "s",
                "variant": variant,
                "M": 1024,
                "N": 1024,
                "K": 1024,
                "size": size,
                "metric": k,
                "value": v,
                "gpu_name": "G",
                "gpu_uuid": "U",
            }
            for k, v in metrics.items()
        ]
    )


KNOWN = {
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": 1e9,  # 2e9 FLOP
    "sm__sass_thread_inst_executed_op_fadd_pred_on.sum": 1e8,  # + 1e8
    "sm__sass_thread_inst_executed_op_dmul_pred_on.sum": 5e7,  # + 5e7 (FP64 counts too)
    "dram__bytes_read.sum": 3e8,
    "dram__bytes_write.sum": 1e8,  # 4e8 bytes at DRAM
    "lts__t_bytes.sum": 1.075e9,
    "l1tex__t_bytes.sum": 2.15e10,
    "gpu__time_duration.sum": 1e6,  # 1 ms
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": 3.2e6,
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": 1e5,
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": 2.5,
    "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio": 9.0,
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio": 0.7,
}


def test_roofline_arithmetic_on_known_values():
    meas = pd.DataFrame(
        [{"variant": "v", "size": "1024x1024x1024", "status": "ok", "median_ms": 1.02}]
    )
    device = pd.DataFrame(
        {
            "quantity": ["copy_gbps", "l2_gbps", "l1_gbps", "fp32_peak_tflops"],
            "value": [4000.0, 5000.0, 20000.0, 60.0],
        }
    )
    r = roofline.roofline(
        _profile_rows(KNOWN), meas, device, ("M", "N", "K"), lambda s: 2 * 1024**3
    ).iloc[0]
    flop = 2e9 + 1e8 + 5e7
    assert r["flop"] == flop
    assert r["dram_bytes"] == 4e8 and r["l2_bytes"] == 1.075e9 and r["l1_bytes"] == 2.15e10
    assert r["ai_dram"] == pytest.approx(flop / 4e8)  # 5.375 FLOP/byte
    assert r["ai_l2"] == pytest.approx(2.0)
    assert r["ai_l1"] == pytest.approx(0.1)
    assert r["ncu_time_ms"] == 1.0
    assert r["tflops"] == pytest.approx(2.15)
    assert r["dram_gbps"] == pytest.approx(400.0)
    assert r["event_over_ncu"] == pytest.approx(1.02)
    assert r["global_st_sectors_per_request"] == pytest.approx(32.0)
    assert r["top_stall"] == "long_scoreboard"  # "selected" is issuing, not a stall
    assert r["top_stall_ratio"] == 2.5
    # attainable: compute 60000 GFLOP/s; DRAM 4000*5.375 = 21500; L2 5000*2 = 10000;
    # L1 20000*0.1 = 2000 GFLOP/s, the lowest roof
    assert r["bound"] == "l1"
    assert math.isnan(r["smem_bank_conflicts_ld"])  # not collected: NaN, not 0


def test_bound_picks_the_lowest_roof():
    ceil = {"copy_gbps": 4000.0, "l2_gbps": 5000.0, "l1_gbps": 20000.0, "fp32_peak_tflops": 60.0}
    assert roofline.bound({"dram": 100.0, "l2": 50.0, "l1": 10.0}, ceil) == "compute"
    assert roofline.bound({"dram": 1.0, "l2": 50.0, "l1": 10.0}, ceil) == "dram"
    assert roofline.bound({"dram": None, "l2": None, "l1": None}, ceil) == "compute"
    assert roofline.bound({"dram": 1.0}, {}) is None


# ------------------------------------------------------------------------------------------
# compute-sanitizer output


@pytest.mark.parametrize(
    ("fixture", "tool"),
    [
        ("san-memcheck-clean.txt", "memcheck"),
        ("san-racecheck-clean.txt", "racecheck"),
        ("san-initcheck-clean.txt", "initcheck"),
        ("san-synccheck-clean.txt", "synccheck"),
    ],
)
def test_sanitizer_clean_runs_parse_as_clean(fixture, tool):
    f = sanitize.parse(tool, (FIXTURES / fixture).read_text())
    assert (f.tool, f.errors, f.warnings, f.first) == (tool, 0, 0, None)


def test_memcheck_finding_names_the_source_line():
    f = sanitize.parse("memcheck", (FIXTURES / "san-memcheck-oob.txt").read_text())
    assert f.errors == 4
    assert "Invalid __global__ write of size 4 bytes" in f.first
    assert f.first.endswith("92_oob.cu:12")


def test_racecheck_counts_errors_and_warnings():
    f = sanitize.parse("racecheck", (FIXTURES / "san-racecheck-race.txt").read_text())
    assert (f.errors, f.warnings) == (1, 1)
    assert "93_race.cu:" in f.first


def test_sanitizer_output_without_a_summary_is_an_error():
    text = (FIXTURES / "san-memcheck-oob.txt").read_text().split("ERROR SUMMARY")[0]
    with pytest.raises(sanitize.SanitizeError, match="no summary line"):
        sanitize.parse("memcheck", text)


def test_memcheck_pads_allocations_and_the_other_tools_do_not():
    launch = ["python", "-m", "kernelbook", "launch"]
    mem = sanitize.sanitizer_command("cs", "memcheck", launch, 4096)
    assert mem[:5] == ["cs", "--tool", "memcheck", "--print-limit", "20"]
    assert mem[-6:] == ["--padding", "4096", *launch]
    race = sanitize.sanitizer_command("cs", "racecheck", launch, 4096)
    assert "--padding" not in race and race[-4:] == launch
    assert "--padding" not in sanitize.sanitizer_command("cs", "memcheck", launch, 0)


def test_host_api_errors_are_the_launch_helpers_to_report():
    """The libraries' probing (cuGetProcAddress) is no finding; a launch that exits non-zero
    with nothing found is failed, naming its last line; a fault's findings decide."""
    launch = ["python", "-m", "kernelbook", "launch"]
    for tool in sanitize.TOOLS:
        cmd = sanitize.sanitizer_command("cs", tool, launch, 4096)
        assert cmd[cmd.index("--report-api-errors") + 1] == "no"
    clean = sanitize.parse("memcheck", (FIXTURES / "san-memcheck-clean.txt").read_text())
    oob = sanitize.parse("memcheck", (FIXTURES / "san-memcheck-oob.txt").read_text())
    assert not sanitize.failed_exit(clean, 0)
    assert sanitize.failed_exit(clean, 1)
    assert not sanitize.failed_exit(oob, 1)
    text = "Traceback ...\nRuntimeError: cuTensorMapEncodeTiled failed\n"
    text += "========= ERROR SUMMARY: 0 errors\n"
    assert sanitize.exit_reason(1, text) == (
        "the launch exited 1: RuntimeError: cuTensorMapEncodeTiled failed"
    )


def test_gate_lists_unexplained_findings_only():
    table = pd.DataFrame(
        [
            {"variant": "a", "size": "100", "tool": "memcheck", "verdict": "clean", "errors": 0,
             "warnings": 0, "first_finding": None},
            {"variant": "b", "size": "100", "tool": "racecheck", "verdict": "known", "errors": 2,
             "warnings": 0, "first_finding": "x"},
            {"variant": "c", "size": "100", "tool": "memcheck", "verdict": "findings", "errors": 3,
             "warnings": 0, "first_finding": "Invalid write at c.cu:9"},
        ]
    )  # fmt: skip
    found = gate.failures("s", {}, sanitizer=table)
    assert [(f.line(), f.expected) for f in found] == [
        ("s/c 100 [sanitize] findings: memcheck reports 3 error(s), 0 warning(s): Invalid "
         "write at c.cu:9", False)
    ]  # fmt: skip


def test_a_kernel_without_flops_has_no_flop_bound():
    moves = {k: v for k, v in KNOWN.items() if "_pred_on" not in k}
    device = pd.DataFrame({"quantity": ["copy_gbps", "fp32_peak_tflops"], "value": [4e3, 60.0]})
    r = roofline.roofline(_profile_rows(moves), None, device, ("M", "N", "K"), lambda s: 0).iloc[0]
    assert r["flop"] == 0 and r["ai_dram"] == 0
    assert r["dram_gbps"] == pytest.approx(400.0)
    assert r["bound"] is None


# ------------------------------------------------------------------------------------------
# The quick loop: `kernelbook profile --size`, no build folder


def test_quick_profile_refuses_a_bad_size_and_a_tuned_variant_by_name(tmp_path):
    """Before any GPU is asked for: a size the problem refuses, and an autotuned variant with
    no tuned table, each one error that names the variant."""
    from conftest import kb

    out, reports = str(tmp_path / "p.parquet"), str(tmp_path / "reports")
    own = {"studies": ["attention"]}
    bad = "B=0,H=1,S=64,D=64,causal=0"
    proc = kb("profile", "attention", "11_fast_exp2", "--size", bad, "--out", out,
              "--reports", reports, settings=own, check=False)  # fmt: skip
    assert proc.returncode != 0 and f"attention/11_fast_exp2: --size: size '{bad}'" in proc.stderr
    proc = kb("profile", "attention", "12_autotuned", "--out", out, "--reports", reports,
              settings=own, check=False)  # fmt: skip
    assert proc.returncode != 0 and "attention/12_autotuned is autotuned" in proc.stderr
    assert not (tmp_path / "p.parquet").exists()


# ------------------------------------------------------------------------------------------
# A study's variants in one ncu run (the pipeline's profile job): the command and the plan


def test_one_ncu_run_of_a_study_takes_every_variants_kernel_in_plan_order(tmp_path):
    """ncu filters on any of the variants' entries (each once) and profiles as many launches
    as the plan holds; the launch helper reads the plan back as the study's variants, in
    order, with their cubins and sizes."""
    from conftest import REPO

    from kernelbook import config as cfg
    from kernelbook.launch.process import plan_command, read_plan, write_plan

    project = cfg.load_project_file(REPO / "config" / "config.yaml")
    study = project.study("sgemm")
    plan = write_plan(
        tmp_path / "study.plan.json",
        [
            ("01_naive", "a/kernel.cubin", ["512", "1024"]),
            ("02_coalescing", "b/kernel.cubin", ["512"]),
        ],
    )
    entries = read_plan(study, plan)
    assert [(v.id, c, s) for v, c, s in entries] == [
        ("01_naive", "a/kernel.cubin", ["512", "1024"]),
        ("02_coalescing", "b/kernel.cubin", ["512"]),
    ]
    cmd = plan_command(project, study, plan)
    assert cmd[cmd.index("launch") :] == ["launch", "sgemm", "--plan", str(plan)]
    names = [v.entry for v, _, _ in entries] + [entries[0][0].entry]
    ncu = profile.ncu_command(names, Path("r"), cmd, {}, launches=3, exe="ncu")
    first, second = entries[0][0].entry, entries[1][0].entry
    assert ncu[ncu.index("-k") + 1] == f"regex:^({first}|{second})$"
    assert ncu[ncu.index("--launch-count") + 1] == "3"
    one = profile.ncu_command([first, first], Path("r"), cmd, {}, launches=2, exe="ncu")
    assert one[one.index("-k") + 1] == f"regex:^{first}$"


def test_a_studys_baseline_is_profiled_beside_its_variants_by_nvtx_range(tmp_path):
    """The study profile's extra entry: the primary baseline, at the same sizes, found by NVTX
    range as a torch variant is; a plan names it (`launch` has no variant of that name), and
    reads back as the baseline; a plan naming a baseline the study does not have is one
    error naming it."""
    from conftest import REPO, kb

    from kernelbook import config as cfg
    from kernelbook.launch.process import BaselineRun, read_plan
    from kernelbook.profile.job import baseline_entries

    project = cfg.load_project_file(REPO / "config" / "config.yaml")
    study = project.study("sgemm")
    [(job, base, cubin, sizes, skip)] = baseline_entries(study, study.profile_sizes)
    assert (job, base, cubin, sizes, skip) == (
        "baseline:cublas",
        BaselineRun("cublas"),
        None,
        list(study.profile_sizes),
        {},
    )
    assert profile.by_range(base) and base.unmet(sizes[0]) == []
    cmd = profile._launch_one(project, study, base, "512", None, tmp_path)
    plan = tmp_path / "512.plan.json"
    assert cmd[cmd.index("launch") :] == ["launch", "sgemm", "--plan", str(plan)]
    [(got, _, labels)] = read_plan(study, plan)
    assert got == BaselineRun("cublas") and labels == ["512"]
    plain = profile._launch_one(project, study, study.variant("01_naive"), "512", "k", tmp_path)
    assert plain[plain.index("launch") :][:3] == ["launch", "sgemm", "01_naive"]
    bad = tmp_path / "bad.json"
    bad.write_text('[{"variant": "baseline:magma", "cubin": "None", "sizes": ["512"]}]')
    proc = kb("launch", "sgemm", "--plan", str(bad), check=False)
    assert proc.returncode == 1
    assert "no baseline 'magma' (baselines: cublas)" in proc.stderr, proc.stderr


def test_a_target_held_against_another_baseline_has_that_one_profiled_too(tmp_path):
    """w4a16's targets are on cuBLAS BF16, a baseline timed beside its primary
    (dequantize, then matmul): the study profile runs both, the primary first, and no other
    (tinygemm_int4 is timed, not profiled); a plan names each."""
    from conftest import REPO

    from kernelbook import config as cfg
    from kernelbook.launch.process import BaselineRun, read_plan
    from kernelbook.profile.job import baseline_entries

    project = cfg.load_project_file(REPO / "config" / "config.yaml")
    study = project.study("w4a16")
    assert {t["metric"] for t in study.targets} == {"pct_of_cublas_bf16"}
    assert study.extra_baselines == ("cublas_bf16", "tinygemm_int4")
    entries = baseline_entries(study, study.profile_sizes)
    assert [e[0] for e in entries] == ["baseline:dequant_matmul", "baseline:cublas_bf16"]
    assert [e[1] for e in entries] == [BaselineRun("dequant_matmul"), BaselineRun("cublas_bf16")]
    label = "1x28672x4096"
    profile._launch_one(project, study, entries[1][1], label, None, tmp_path)
    [(got, _, labels)] = read_plan(study, tmp_path / f"{label}.plan.json")
    assert got == BaselineRun("cublas_bf16") and labels == [label]
    # a study whose targets are all on its primary profiles that one alone
    assert project.study("sgemm").profiled_baselines == ("cublas",)


def test_a_launch_plan_that_is_not_one_is_one_error_naming_it(tmp_path):
    from conftest import kb

    bad = tmp_path / "plan.json"
    for text, why in (
        ('[{"variant": "99_none", "cubin": "k", "sizes": ["512"]}]', "99_none"),
        ('[{"variant": "01_naive", "cubin": "k", "sizes": []}]', "needs"),
        ("{not json", "not a launch plan"),
    ):
        bad.write_text(text)
        proc = kb("launch", "sgemm", "--plan", str(bad), check=False)
        assert proc.returncode == 1, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("kernelbook: error: ") and why in last, last
    proc = kb("launch", "sgemm", "01_naive", "--plan", str(bad), check=False)
    assert "launch --plan: the plan names the variants, sizes and cubins" in proc.stderr


def test_a_study_profile_names_what_it_lacks_before_the_gpu(tmp_path):
    """`kernelbook profile STUDY --all` (or several variants): the folders it reads, then each
    variant's table, checked before any GPU is asked for; one error naming the culprit."""
    from conftest import kb

    out, reports = str(tmp_path / "p.parquet"), str(tmp_path / "reports")
    own = {"studies": ["transpose"]}
    proc = kb("profile", "transpose", "--all", "--out", out, "--reports", reports,
              settings=own, check=False)  # fmt: skip
    assert proc.returncode == 1
    assert "profile transpose: give --build-dir, --bench-dir, --tuned-dir" in proc.stderr
    bench, tuned = tmp_path / "bench", tmp_path / "tuned"
    proc = kb("profile", "transpose", "--all", "--build-dir", str(tmp_path), "--bench-dir",
              str(bench), "--tuned-dir", str(tuned), "--out", out, "--reports", reports,
              settings=own, check=False)  # fmt: skip
    assert proc.returncode == 1
    first = proc.stderr.strip().splitlines()[-1]
    assert first.startswith("kernelbook: error: transpose/00_copy: no bench table at "), first
    proc = kb("profile", "transpose", "00_copy", "01_naive", "--cubin", "k.cubin", "--out",
              out, "--reports", reports, settings=own, check=False)  # fmt: skip
    assert proc.returncode == 1 and "not --cubin" in proc.stderr
    # variants named and no folder: the quick loop compiles them now, but a tuned one has no
    # one cubin to compile: refused, naming it, before anything is built or the GPU asked for
    proc = kb("profile", "transpose", "00_copy", "06_tuned", "--out", out, "--reports",
              reports, settings=own, check=False)  # fmt: skip
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (
        "kernelbook: error: profile transpose: 06_tuned autotuned: name its candidates, or "
        "give --build-dir, --bench-dir and --tuned-dir"
    ), last
    # the study's sanitize job: the same folders, the same checks
    proc = kb("sanitize", "transpose", "--all", "--build-dir", str(tmp_path), "--bench-dir",
              str(bench), "--out", out, settings=own, check=False)  # fmt: skip
    assert proc.returncode == 1
    assert "kernelbook: error: sanitize transpose: give --tuned-dir" in proc.stderr
    proc = kb("sanitize", "transpose", "00_copy", "01_naive", "--build-dir", str(tmp_path),
              "--bench-dir", str(bench), "--out", out, settings=own, check=False)  # fmt: skip
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("kernelbook: error: transpose/00_copy: no bench table at "), last
    assert not Path(out).exists()


def test_a_study_run_is_read_only_when_its_launches_are_the_plans_in_order():
    """The report of a study's one ncu run is mapped to the plan launch by launch: a missing
    launch, or a kernel other than the one planned there, sends the study to the per-variant
    runs instead of mislabelling rows."""
    kernel, _ = profile.read_report(REPORT)  # "sgemm_coalescing", as ncu names it
    plan = ["sgemm_coalescing", "sgemm_naive"]
    assert profile.out_of_order([kernel, "sgemm_naive"], plan) is None
    assert profile.out_of_order(["void sgemm_naive(float *)"], ["sgemm_naive"]) is None
    assert profile.out_of_order([kernel], plan) == "1 kernels profiled for 2 launches"
    assert profile.out_of_order(["sgemm_naive", kernel], plan) == (
        "launch 0 should be sgemm_coalescing, the report has sgemm_naive"
    )
    assert profile.out_of_order(["sgemm_coalescing_v2"], ["sgemm_coalescing"]) is not None


def test_a_study_sanitize_runs_only_plain_variants_together():
    """What one compute-sanitizer process a tool may hold: variants with nothing to expect.
    A negative control (expect), a variant with known findings, and one the bench found
    failing run on their own, as does a lone plain variant."""
    from types import SimpleNamespace

    def v(vid, known=None):
        return SimpleNamespace(id=vid, known_findings=known or {})

    plain = [("a", v("a"), "a.cubin", {"N": 1}, None, None, None),
             ("b", v("b"), "b.cubin", {"N": 1}, None, None, None)]  # fmt: skip
    control = ("c", v("c"), "c.cubin", {"N": 1}, None, None, "race")
    known = ("d", v("d", {"initcheck": "why"}), "d.cubin", {"N": 1}, None, None, None)
    failed = ("e", v("e"), "e.cubin", {"N": 1}, None, ("wrong", "at 512"), None)
    together, alone = sanitize.split_runs([*plain, control, known, failed])
    assert [e[0] for e in together] == ["a", "b"]
    assert [e[0] for e in alone] == ["c", "d", "e"]
    together, alone = sanitize.split_runs([plain[0], control])
    assert together == [] and [e[0] for e in alone] == ["a", "c"]


class _Domain:
    def __init__(self, names):
        self.names = names

    def push_pop_ranges(self):
        return self.names


class _NvtxState:
    """ncu_report's INvtxState: the ids of its domains, each domain by its id."""

    def __init__(self, *domains):
        self.by_id = {7 + i: d for i, d in enumerate(domains)}

    def domains(self):
        return list(self.by_id)

    def domain_by_id(self, i):
        return self.by_id[i]


class _Action:
    """A profiled kernel as ncu_report gives it, with the NVTX ranges it ran in."""

    def __init__(self, name, *ranges):
        self._name, self.ranges = name, ranges

    def name(self):
        return self._name

    def nvtx_state(self):
        return _NvtxState(_Domain([]), _Domain(list(self.ranges)))


def test_kernels_found_by_nvtx_range_are_grouped_by_the_launch_around_them():
    """A ranged run (torch and several-kernel variants in one ncu process): each kernel
    belongs to the launch whose kernelbook_launch:<i> range it ran in, however many kernels
    a launch has; a kernel outside every planned launch, or a launch without a kernel, is an
    error that sends the variants back to a process a size, never a mislabelled row."""
    from kernelbook.launch.process import NVTX_LAUNCH, NVTX_RANGE

    def at(i, name):
        return _Action(name, NVTX_RANGE, f"{NVTX_LAUNCH}{i}")

    acts = [at(0, "a"), at(0, "b"), at(1, "c"), at(2, "d"), at(2, "e"), at(2, "f")]
    groups = profile.group_by_launch(acts, 3, "s")
    assert [[a.name() for a in g] for g in groups] == [["a", "b"], ["c"], ["d", "e", "f"]]
    with pytest.raises(profile.ProfileError, match=r"s: no kernel profiled in launch\(es\) \[1\]"):
        profile.group_by_launch([at(0, "a"), at(2, "d")], 3, "s")
    with pytest.raises(profile.ProfileError, match=r"kernel x is in no planned launch \(5\)"):
        profile.group_by_launch([at(0, "a"), at(5, "x")], 3, "s")
    with pytest.raises(profile.ProfileError, match=r"kernel y is in no planned launch \(None\)"):
        profile.group_by_launch([_Action("y", NVTX_RANGE)], 1, "s")
    # a report taken without --nvtx (the named-kernel runs') has no NVTX state at all
    ncu_report = profile.import_ncu_report()
    real = ncu_report.load_report(str(REPORT)).range_by_idx(0).action_by_idx(0)
    assert profile.launch_of(real) is None


# A ranged run's report from the H200 (the book run at 86f5f04): decode_gemm's 04_split_k at
# its two profiled sizes, each launch a split-K kernel and its combine kernel.
RANGED_REPORT = FIXTURES / "decode_gemm_04_ranged.ncu-rep"


def test_a_real_ranged_report_is_read_launch_by_launch():
    ncu_report = profile.import_ncu_report()
    got = ncu_report.load_report(str(RANGED_REPORT)).range_by_idx(0)
    actions = [got.action_by_idx(i) for i in range(got.num_actions())]
    assert [profile.launch_of(a) for a in actions] == [0, 0, 1, 1]
    each = profile.read_report_by_launch(RANGED_REPORT, 2, "decode_gemm")
    assert [name for name, _ in each] == ["decode_split_k; decode_split_k_combine"] * 2
    # a launch's time is its two kernels' together
    alone = [
        next(v for n, v, _ in m if n == "gpu__time_duration.sum")
        for _, m in ncu_read.read_report_each(RANGED_REPORT)
    ]
    both = [next(v for n, v, _ in m if n == "gpu__time_duration.sum") for _, m in each]
    assert both == [alone[0] + alone[1], alone[2] + alone[3]] and min(alone) > 0
    with pytest.raises(profile.ProfileError, match=r"no kernel profiled in launch\(es\) \[2\]"):
        profile.read_report_by_launch(RANGED_REPORT, 3, "decode_gemm")
