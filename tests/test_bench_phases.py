"""The two phases of a bench job (kernelbook.measure.bench.bench_variant): every size checked,
and the kept sizes set up for their timing, while the GPU's lock is held shared (beside
other jobs' checks); then the lock held alone for the timing only. A check that runs out of
device memory beside the other jobs' checks runs again with the GPU alone; one that runs
out alone is an error. Here the order of events is what is tested: the device work (the
Bench, a size's set-up and its sampling) is a stand-in that logs what it is asked to do,
on the real problem, study and row schema of the sgemm study. The GPU tier runs the real
thing in every bench job (test_gpu.py, the book's run)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import REPO

from kernelbook import config as cfg
from kernelbook.build.job import BuildInfo
from kernelbook.measure import bench
from kernelbook.problems.base import Case, CheckResult, GuardedArray

SIZES = [{"M": 128, "N": 128, "K": 128}, {"M": 256, "N": 256, "K": 256}]


class OutOfMemory(Exception):
    pass


class FakeBench:
    """A Bench that logs what bench_variant asks of it; ``oom`` names the checks (size M)
    that run out of memory, as many times as listed."""

    def __init__(self, events: list, oom: list[int], project, study, uuid, log):
        self.events, self.oom = events, oom
        self.study, self.project = study, project
        self.cp = SimpleNamespace(asnumpy=np.asarray)
        self.torch = SimpleNamespace(
            cuda=SimpleNamespace(stream=lambda s: contextlib.nullcontext())
        )
        self.stream = self.torch_stream = contextlib.nullcontext()
        self.provenance = {"gpu_uuid": uuid}

    def where(self, variant, s):
        return f"{variant.id} M={s['M']}"

    def load(self, variant, build):
        return SimpleNamespace(kind="cuda")

    def check(self, kernel, variant, s):
        self.events.append(f"check {s['M']}")
        if s["M"] in self.oom:
            self.oom.remove(s["M"])
            raise OutOfMemory("Out of memory allocating 12,677,087,232 bytes")
        y = GuardedArray(np, s["M"] * s["N"], np.float32, guard=8)
        case = Case(
            sizes=s, dtype="float32", seed=1, inputs={"A": np.zeros(4, np.float32)},
            outputs={"C": y}, initial={}, reference={"C": np.zeros(4)}, args=(),
        )  # fmt: skip
        return case, None, None, CheckResult(1e-7, 1e-6), 1e-4

    def out_of_memory(self, e):
        return isinstance(e, OutOfMemory)

    def free(self):
        pass

    def settle(self):
        self.events.append("settle")

    def close(self):
        pass


@pytest.fixture
def phases(monkeypatch, tmp_path):
    """run(oom=[...], fail_prepare=M) -> the events of one bench_variant of sgemm 01_naive."""
    project = cfg.load_project_file(REPO / "config" / "config.yaml")
    study = project.study("sgemm")
    variant = study.variant("01_naive")
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"cubin")
    events: list[str] = []

    def run(oom=(), fail_prepare=None, keep_bytes=1 << 30):
        events.clear()

        def make(*a):
            b = FakeBench(events, list(oom), *a)
            b.keep_bytes = keep_bytes
            return b

        monkeypatch.setattr(bench, "Bench", make)

        def prepare(b, kernel, v, s, checked, kept=None):
            events.append(f"prepare {s['M']}" + (" kept" if kept is not None else ""))
            if s["M"] == fail_prepare and kept is not None:  # beside others only
                raise OutOfMemory("CUDA out of memory")
            return s["M"]

        def sample(b, kernel, v, s, p, checked, blank, samples=None):
            events.append(f"time {s['M']}")
            return {**blank(s, "ok", None), "median_ms": 1.0}

        monkeypatch.setattr(bench, "prepare_size", prepare)
        monkeypatch.setattr(bench, "time_prepared", sample)
        rows = bench.bench_variant(
            project, study, variant, BuildInfo(cubin, "13.0", ""), "GPU-x", sizes=SIZES,
            hold=lambda shared: events.append("shared" if shared else "alone"),
        )  # fmt: skip
        return rows, list(events)

    return run


def test_checks_and_set_up_beside_others_and_only_the_timing_alone(phases):
    rows, events = phases()
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert events == [
        "shared",
        "check 128", "check 256",  # correct before fast: every size first
        "prepare 128 kept", "prepare 256 kept",  # baselines, references: still shared
        "settle",  # nothing of it runs on once the GPU is another's alone
        "alone",
        "time 128", "time 256",
    ]  # fmt: skip


def test_a_size_past_the_keep_budget_is_set_up_at_its_timing(phases):
    # the inputs are kept (small) but the prepared set-up (baselines' outputs) is not
    rows, events = phases(keep_bytes=400_000)
    assert events.index("alone") < events.index("prepare 256 kept") < events.index("time 256")
    assert "prepare 128 kept" in events[: events.index("alone")]


def test_a_check_out_of_memory_beside_others_runs_again_alone(phases):
    rows, events = phases(oom=[256])
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert events[:5] == ["shared", "check 128", "check 256", "alone", "check 256"]
    assert events.count("shared") == 1  # alone from there to the end of the job
    assert events[-2:] == ["time 128", "time 256"]


def test_a_check_out_of_memory_with_the_gpu_alone_is_an_error(phases):
    with pytest.raises(OutOfMemory, match="Out of memory allocating"):
        phases(oom=[256, 256])


def test_a_set_up_out_of_memory_leaves_that_size_and_the_rest_to_their_timing(phases):
    rows, events = phases(fail_prepare=128)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    shared = events[: events.index("alone")]
    assert "prepare 128 kept" in shared and "prepare 256 kept" not in shared
    # made again at the timing, alone: 128's inputs (its kept case went with the failed
    # set-up), 256's kept inputs
    assert events[events.index("alone") :] == [
        "alone", "prepare 128", "time 128", "prepare 256 kept", "time 256",
    ]  # fmt: skip
