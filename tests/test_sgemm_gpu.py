"""sgemm's stream-K step on the GPU: blocks that run at once hand partial sums to each other
through the workspace, which the CPU emulator (blocks one after another) cannot try. Checked
through the library's own launcher, as a bench launches it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import kb

from kernelbook import config, gpu, problems

ROOT = Path(__file__).resolve().parents[1]
INFO, WHY = gpu.detect()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}")]


def test_stream_k_sums_are_right_the_same_every_launch_and_leave_the_flags_down(tmp_path):
    """15_stream_k at a size of data-parallel rows and a stream-K row, one of stream-K only
    (fewer tiles than blocks, split-K) and one with remainders in M, N and K: each launch
    matches the float64 reference, three launches over one workspace give the same bits (the
    partials are added in a fixed order), and every flag is down after each launch."""
    import cupy as cp

    from kernelbook.launch import kernel as launch_kernel

    project = config.load_project_file(
        ROOT / "config" / "config.yaml", overrides={"studies": ["sgemm"]}
    )
    study = project.study("sgemm")
    v = study.variant("15_stream_k")
    cubin = tmp_path / "kernel.cubin"
    kb("compile", "sgemm", v.id, "--cubin", str(cubin))
    kernel = launch_kernel.load_kernel(ROOT, study, v, cubin)
    problem = problems.get(study.problem)
    d = v.defines
    kinds = set()
    for M, N, K in [(4096, 4096, 256), (1024, 1024, 1024), (1000, 1004, 996)]:
        sizes = {"M": M, "N": N, "K": K}
        case = problem.setup(sizes, study.dtype, study.params, project.settings["seed"])
        run, launch = launch_kernel.kernel_launcher(kernel, study, v, sizes, case)
        kinds.add("rows and stream-K" if launch.grid[1] > 1 else "stream-K only")
        flags = run.workspace[d["MAX_SK"] * d["BM"] * d["BN"] * 4 :]
        outs = []
        for _ in range(3):
            case.reset()
            run()
            cp.cuda.Device().synchronize()
            outs.append(cp.asnumpy(case.outputs["C"].view))
            assert not bool(flags.any()), f"{sizes}, grid {launch.grid}: flags left up"
        tol = problem.tolerance(sizes, study.dtype)
        got = problem.check(case, tol, f"sgemm/15_stream_k at {sizes}")
        assert got.rel_err <= tol, (sizes, got)
        assert all(np.array_equal(outs[0], o) for o in outs[1:]), f"{sizes}: bits differ"
    assert kinds == {"rows and stream-K", "stream-K only"}, kinds
