"""tools/gpu-tests.sh, the GPU tier's runner for hosts that cut commands short: one pytest
process per file group, a verdict a test from its JUnit XML (tools/junit-summary.py). Here,
without a GPU, its tests are skipped (visibly), which is what it must then report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

from conftest import REPO, has_gpu

DEMO = """
import pytest

def test_pass():
    pass

def test_fail():
    assert 1 == 2

@pytest.mark.skip(reason="not here")
def test_skip():
    pass

@pytest.mark.parametrize("x", ["a", "b"])
def test_param(x):
    assert x == "a"

class TestGroup:
    def test_inner(self):
        pass
"""


def test_junit_summary_gives_each_asked_test_its_verdict(tmp_path):
    (tmp_path / "test_demo.py").write_text(textwrap.dedent(DEMO))
    report = tmp_path / "r.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
        + [f"--junitxml={report}", "test_demo.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stdout  # test_fail and test_param[b]
    ids = [
        "test_demo.py::test_pass",
        "test_demo.py::test_fail",
        "test_demo.py::test_skip",
        "test_demo.py::test_param[a]",
        "test_demo.py::test_param[b]",
        "test_demo.py::TestGroup::test_inner",
        "test_demo.py::test_never_ran",
    ]
    out = subprocess.run(
        [sys.executable, REPO / "tools" / "junit-summary.py", report, "1", "3", *ids],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    assert [r[0] for r in rows] == ids
    got = {r[0].split("::", 1)[1]: (r[1], r[3]) for r in rows}
    assert got == {
        "test_pass": ("0", "passed"),
        "test_fail": ("1", "failed"),
        "test_skip": ("0", "skipped"),
        "test_param[a]": ("0", "passed"),
        "test_param[b]": ("1", "failed"),
        "TestGroup::test_inner": ("0", "passed"),
        "test_never_ran": ("2", "not run (pytest exit 1)"),
    }
    # no report at all (the process was killed before writing it): nothing ran
    out = subprocess.run(
        [sys.executable, REPO / "tools" / "junit-summary.py", tmp_path / "none.xml", "124", "9"]
        + ids[:1],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == "test_demo.py::test_pass\t2\t0\tnot run (pytest exit 124)\n"


def test_gpu_tests_runs_a_file_group_in_one_process(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    for item in ("tests", "src", "config", "kernels", "pyproject.toml"):
        (root / item).symlink_to(REPO / item)
    shutil.copytree(REPO / "tools", root / "tools")
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    pats = [
        r"test_attention_gpu.py::test_variant_correct_at_small_and_odd_shapes\[1[56]_",
        "test_gpu.py::test_concurrent_jobs",
    ]
    proc = subprocess.run(
        ["bash", root / "tools" / "gpu-tests.sh", *pats],
        cwd=root,
        env={**env, "ONLY": "1", "RUN": "first"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    logs = root / "results" / "logs" / "gpu-tests"
    rows = [ln.split("\t") for ln in (logs / "summary-first.tsv").read_text().splitlines()]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r[0] for r in rows] == [
        "tests/test_attention_gpu.py::test_variant_correct_at_small_and_odd_shapes[15_persistent]",
        "tests/test_attention_gpu.py::test_variant_correct_at_small_and_odd_shapes"
        "[16_persistent_fma_exp2]",
        "tests/test_gpu.py::test_concurrent_jobs_land_on_distinct_gpus",
    ]
    # without a GPU each is skipped, visibly, and counted as no failure
    want = {("0", "passed"), ("0", "skipped")} if has_gpu() else {("0", "skipped")}
    assert {(r[1], r[3]) for r in rows} <= want
    # two files, two pytest processes; the attention pair shared one
    assert sorted(p.name for p in logs.glob("*.log")) == [
        "first-001-tests_test_attention_gpu.py.log",
        "first-002-tests_test_gpu.py.log",
    ]
    text = (logs / "first-001-tests_test_attention_gpu.py.log").read_text()
    assert ("2 passed" if has_gpu() else "2 skipped") in text
    assert "3 tests, 0 failed or not run" in proc.stdout
