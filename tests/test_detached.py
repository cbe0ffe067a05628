"""tools/gpu-detached.sh on a machine that goes away between calls: with KERNELBOOK_RESUME
naming the last call's snapshot, a call that finds no run of its own restores the snapshot
before it starts the workload (the run goes on from its tables), a call that finds its run
live leaves the snapshot alone, and a snapshot that is not there stops it before anything
starts. Real bash, the real snapshot and restore tools, a workload that reads what it finds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def checkout(root: Path) -> Path:
    """A tree with the project's tools and a python3 on the PATH (the host's interpreter)."""
    shutil.copytree(REPO / "tools", root / "tools")
    return root


def detached(root: Path, state: Path, out: Path, *workload: str, resume: Path | None = None):
    bindir = root.parent / "bin"
    bindir.mkdir(exist_ok=True)
    py = bindir / "python3"
    if not py.exists():
        py.symlink_to(sys.executable)
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "KERNELBOOK_DETACHED_DIR": str(state),
        "KERNELBOOK_GIT_COMMIT": "c0ffee",
    }
    env.pop("KERNELBOOK_RESUME", None)
    if resume is not None:
        env["KERNELBOOK_RESUME"] = str(resume)
    return subprocess.run(
        ["bash", str(root / "tools" / "gpu-detached.sh"), "20", str(out), *workload],
        cwd=root, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_fresh_machine_resumes_from_the_carried_snapshot(tmp_path):
    # the first machine: a run that made one table, then went away; its call left a snapshot
    first = checkout(tmp_path / "first")
    table = first / "results" / "nvidia-h200" / "sgemm" / "bench" / "01_naive.parquet"
    table.parent.mkdir(parents=True)
    table.write_bytes(b"measured on the first machine")
    (first / ".snakemake" / "metadata").mkdir(parents=True)
    (first / ".snakemake" / "metadata" / "record").write_text("{}")
    snap = tmp_path / "snap"
    proc = detached(first, tmp_path / "state1", snap, "true")
    assert proc.returncode == 0, proc.stderr
    assert (snap / "snapshot.json").is_file() and (snap / "state.txz").is_file()

    # the next machine: no run of its own; the workload sees the first machine's table
    second = checkout(tmp_path / "second")
    rel = table.relative_to(first)
    reads = f"cat {rel} > results/seen"
    work = ("bash", "-c", reads)
    proc = detached(second, tmp_path / "state2", tmp_path / "out2", *work, resume=snap)
    assert proc.returncode == 0, proc.stderr
    assert f"resumed from {snap}" in proc.stdout and "c0ffee" in proc.stdout, proc.stdout
    assert "done: exit 0" in proc.stdout, proc.stdout
    assert (second / "results" / "seen").read_bytes() == b"measured on the first machine"
    assert (second / ".snakemake" / "metadata" / "record").is_file()

    # a later call on that machine: its run is live (here, ended), so the snapshot, older than
    # the run, is left alone and nothing the run made is overwritten
    (second / "results" / "seen").write_text("the second machine's own")
    proc = detached(second, tmp_path / "state2", tmp_path / "out3", "true", resume=snap)
    assert proc.returncode == 0, proc.stderr
    assert "left alone: this machine's run is live" in proc.stdout, proc.stdout
    assert "resumed from" not in proc.stdout
    assert (second / "results" / "seen").read_text() == "the second machine's own"


def test_a_resume_without_a_snapshot_starts_nothing(tmp_path):
    root = checkout(tmp_path / "root")
    (root / "results").mkdir()
    state = tmp_path / "state"
    missing = tmp_path / "no-such-snapshot"
    proc = detached(root, state, tmp_path / "out", "touch", "results/ran", resume=missing)
    assert proc.returncode == 1
    assert f"KERNELBOOK_RESUME={missing} holds no snapshot" in proc.stderr, proc.stderr
    assert not (state / "started").exists() and not (root / "results" / "ran").exists()
    # a snapshot without Snakemake's records: restore-snapshot refuses it by name, and the
    # workload does not start
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "snapshot.json").write_text('{"commit": "c0ffee", "made_at": "now"}')
    proc = detached(root, state, tmp_path / "out", "touch", "results/ran", resume=partial)
    assert proc.returncode == 1
    assert "no state.txz or state.tgz" in proc.stderr, proc.stderr
    assert "could not resume" in proc.stderr, proc.stderr
    assert not (state / "started").exists() and not (root / "results" / "ran").exists()


def only(bindir: Path, *tools: str) -> Path:
    """A PATH of just these commands (the host's), to run a tool where others are missing."""
    bindir.mkdir()
    for tool in tools:
        found = shutil.which(tool)
        assert found, f"{tool} not on the PATH"
        (bindir / tool).symlink_to(found)
    return bindir


@pytest.mark.skipif(shutil.which("xz") is None, reason="needs xz")
def test_a_snapshot_is_xz_or_gzip_and_restores_either_way(tmp_path):
    root = checkout(tmp_path / "root")
    table = root / "results" / "nvidia-h200" / "sgemm" / "bench" / "01_naive.parquet"
    table.parent.mkdir(parents=True)
    table.write_bytes(b"measured")
    (root / "results" / "build" / "sgemm").mkdir(parents=True)
    (root / "results" / "build" / "sgemm" / "kernel.cubin").write_bytes(bytes(range(256)) * 64)
    (root / ".snakemake" / "metadata").mkdir(parents=True)
    (root / ".snakemake" / "metadata" / "record").write_text("{}")
    env = {**os.environ, "KERNELBOOK_GIT_COMMIT": "c0ffee"}
    snap = tmp_path / "snap"
    # a host without xz writes gzip parts ...
    bare = only(tmp_path / "bare", "bash", "tar", "gzip", "dirname", "mkdir", "date", "mv", "rm")
    proc = subprocess.run(
        ["bash", str(root / "tools" / "snapshot.sh"), str(snap)],
        env={**env, "PATH": str(bare)}, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in snap.iterdir()) == [
        "build.tgz", "results.tgz", "snapshot.json", "state.tgz",
    ]  # fmt: skip
    # ... which a later snapshot into the same folder, with xz, replaces: one file a part
    proc = subprocess.run(
        ["bash", str(root / "tools" / "snapshot.sh"), str(snap)],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in snap.iterdir()) == [
        "build.txz", "results.txz", "snapshot.json", "state.txz",
    ]  # fmt: skip

    def restore(into: Path) -> list[str]:
        return [sys.executable, str(into / "tools" / "restore-snapshot.py"), str(snap)]

    for kind in ("txz", "tgz"):
        if kind == "tgz":  # the same snapshot, gzip again
            for part in ("results", "build", "state"):
                subprocess.run(
                    f"xz -dc {part}.txz | gzip > {part}.tgz && rm {part}.txz",
                    shell=True, cwd=snap, check=True,
                )  # fmt: skip
        fresh = checkout(tmp_path / f"fresh-{kind}")
        proc = subprocess.run(restore(fresh), env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert "3 file(s)" in proc.stdout, proc.stdout
        rel = table.relative_to(root)
        assert (fresh / rel).read_bytes() == b"measured"
        cubin = fresh / "results" / "build" / "sgemm" / "kernel.cubin"
        assert cubin.read_bytes() == bytes(range(256)) * 64
    # an interpreter without lzma reads the .txz parts through the xz tool
    for part in ("results", "build", "state"):
        subprocess.run(
            f"gzip -dc {part}.tgz | xz -T0 > {part}.txz && rm {part}.tgz",
            shell=True, cwd=snap, check=True,
        )  # fmt: skip
    fresh = checkout(tmp_path / "fresh-nolzma")
    script = str(fresh / "tools" / "restore-snapshot.py")
    nolzma = (
        "import runpy, sys; sys.modules['lzma'] = None; "
        f"sys.argv = [{script!r}, {str(snap)!r}]; runpy.run_path({script!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", nolzma], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (fresh / table.relative_to(root)).read_bytes() == b"measured"
    # both kinds of one part: which is the newer cannot be told, so nothing is restored
    shutil.copy(snap / "state.txz", snap / "state.tgz")
    fresh = checkout(tmp_path / "fresh-both")
    proc = subprocess.run(restore(fresh), env=env, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "both state.txz and state.tgz" in proc.stderr, proc.stderr
    assert not (fresh / "results").exists()
