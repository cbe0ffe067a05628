"""A measurement holds across an edit after which its builds compile to the same SASS
(kernelbook.build.samecode): real git, real nvcc and cuobjdump, the build each published
row records, and the answer kept in the cache."""

from __future__ import annotations

import json
import shutil
import subprocess

import pandas as pd
import pytest

from kernelbook.build import samecode
from kernelbook.build.samecode import Build, builds, same_machine_code
from kernelbook.provenance import sha256_source

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

KERNEL = """#include "helpers.cuh"
extern "C" __global__ void k(const float* __restrict__ x, float* __restrict__ y, int n)
{
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = twice(x[i]) + SHIFT;
}
"""
HELPERS = """#pragma once
__device__ __forceinline__ float twice(float v) { return 2.0f * v; }
"""


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.setenv(samecode.CACHE_ENV, str(tmp_path / "cache"))
    root = tmp_path / "r"
    (root / "k").mkdir(parents=True)
    (root / "k" / "a.cu").write_text(KERNEL)
    (root / "k" / "helpers.cuh").write_text(HELPERS)
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "measured")
    return root


def git(root, *args) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def measured(root, *shifts) -> list[Build]:
    """The builds the published rows of k/a.cu record: one per SHIFT define, at HEAD."""
    head = git(root, "rev-parse", "HEAD")
    h = sha256_source(root / "k" / "a.cu")
    rows = pd.DataFrame(
        [
            {
                "variant": f"a__SHIFT{s}",
                "source_sha256": h,
                "defines": json.dumps({"SHIFT": s}),
                "nvcc_flags": "-O3 -lineinfo",
                "arch": "sm_90",
                "git_commit": head,
            }
            for s in shifts
            for _ in range(2)  # two sizes: one build
        ]
    )
    return builds(rows)


def test_a_helper_moved_into_the_kernel_keeps_the_measurement(repo):
    was = measured(repo, 1, 3)
    assert len(was) == 2
    # the header folded into the kernel, renamed, comments and lines moved: other source,
    # other hash, the same instructions
    (repo / "k" / "helpers.cuh").unlink()
    (repo / "k" / "a.cu").write_text(
        "// the helper lives here now\n"
        + HELPERS.replace("#pragma once\n", "").replace("twice", "doubled")
        + KERNEL.replace('#include "helpers.cuh"\n', "").replace("twice", "doubled")
    )
    assert sha256_source(repo / "k" / "a.cu") != was[0].source_sha256
    assert same_machine_code(repo, "k/a.cu", was)


def test_code_that_compiles_differently_is_a_change(repo):
    was = measured(repo, 1)
    (repo / "k" / "helpers.cuh").write_text(HELPERS.replace("2.0f * v", "2.0f * v + 1.0f"))
    assert not same_machine_code(repo, "k/a.cu", was)


def test_each_measured_build_is_compiled_with_its_own_defines(repo):
    """An edit inside a branch only one define takes changes that build's code alone."""
    kernel = KERNEL.replace("+ SHIFT;", "+ (SHIFT > 2 ? SHIFT * 2 : SHIFT);")
    (repo / "k" / "a.cu").write_text(kernel)
    git(repo, "commit", "-qam", "a branch on SHIFT")
    one, both = measured(repo, 1), measured(repo, 1, 3)
    (repo / "k" / "a.cu").write_text(kernel.replace("SHIFT * 2", "SHIFT * 4"))
    assert same_machine_code(repo, "k/a.cu", one)
    assert not same_machine_code(repo, "k/a.cu", both)


def test_what_git_cannot_show_is_not_the_same(repo):
    was = measured(repo, 1)[0]
    (repo / "k" / "a.cu").write_text("// reworded\n" + KERNEL)
    unknown = Build(**{**was.__dict__, "git_commit": "0" * 40})
    other = Build(**{**was.__dict__, "source_sha256": "0" * 64})  # not what that commit holds
    dirty = Build(**{**was.__dict__, "git_commit": was.git_commit + "-dirty"})
    assert same_machine_code(repo, "k/a.cu", [was])
    for build in (unknown, other, dirty):
        assert not same_machine_code(repo, "k/a.cu", [build]), build
    assert not same_machine_code(repo, "k/gone.cu", [was])
    assert not same_machine_code(repo, "k/a.cu", [])
    assert builds(pd.DataFrame([{"variant": "a", "source_sha256": "x"}])) == []


def test_the_answer_is_kept_and_asked_for_again(repo, monkeypatch):
    was = measured(repo, 1)
    (repo / "k" / "a.cu").write_text("// reworded\n" + KERNEL)
    assert same_machine_code(repo, "k/a.cu", was)
    (memo,) = list((repo.parent / "cache").iterdir())
    assert memo.read_text() == "same"

    def no_compile(*a, **kw):
        raise AssertionError("compiled again")

    monkeypatch.setattr(samecode, "_sass", no_compile)
    assert same_machine_code(repo, "k/a.cu", was)
    memo.write_text("differs")  # the cache is what answers
    assert not same_machine_code(repo, "k/a.cu", was)
